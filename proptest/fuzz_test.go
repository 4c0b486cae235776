package proptest

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/vyre-go/vyrecuda/fusion"
)

// The fuzz targets decode requests from raw bytes and check them with the
// same model checks as the properties. Requests use a few handles and small
// addresses so overlaps are common; flag bits in each record move it near
// the top of the address space or give it a negative or huge length.

const maxFuzzRequests = 256

// decodeUploads reads 3-byte records: flags|handle, dst, len.
func decodeUploads(data []byte) []fusion.UploadCopy {
	var copies []fusion.UploadCopy
	for i := 0; i+3 <= len(data) && len(copies) < maxFuzzRequests; i += 3 {
		flags, dst, n := data[i], uint64(data[i+1]), int(data[i+2]%17)
		if flags&0x80 != 0 {
			dst = math.MaxUint64 - dst
		}
		var payload []byte
		if n > 0 || flags&0x40 != 0 {
			payload = make([]byte, n)
		}
		for j := range payload {
			payload[j] = byte(len(copies)*37+j*11) ^ data[i+2]
		}
		copies = append(copies, fusion.UploadCopy{Handle: uint64(flags & 3), Dst: dst, Data: payload})
	}
	return copies
}

// decodeReadbacks reads 3-byte records: flags|handle, src, len.
func decodeReadbacks(data []byte) []fusion.ReadbackCopy {
	var reqs []fusion.ReadbackCopy
	for i := 0; i+3 <= len(data) && len(reqs) < maxFuzzRequests; i += 3 {
		flags, src, n := data[i], uint64(data[i+1]), int(data[i+2]%17)
		if flags&0x80 != 0 {
			src = math.MaxUint64 - src
		}
		switch {
		case flags&0x60 == 0x60:
			n = math.MaxInt - int(data[i+2])
		case flags&0x40 != 0:
			n = -1 - int(data[i+2])
		}
		reqs = append(reqs, fusion.ReadbackCopy{Handle: uint64(flags & 3), Src: src, Len: n})
	}
	return reqs
}

func FuzzFuseUploads(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if msg := checkUploads(decodeUploads(data)); msg != "" {
			t.Fatal(msg)
		}
	})
}

func FuzzFuseReadbacks(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if msg := checkReadbacks(decodeReadbacks(data)); msg != "" {
			t.Fatal(msg)
		}
	})
}

// fuzzReader hands out little-endian words from the input and zeros once
// it is exhausted, so every input decodes.
type fuzzReader struct{ data []byte }

func (r *fuzzReader) u64() uint64 {
	if len(r.data) >= 8 {
		v := binary.LittleEndian.Uint64(r.data)
		r.data = r.data[8:]
		return v
	}
	var buf [8]byte
	copy(buf[:], r.data)
	r.data = nil
	return binary.LittleEndian.Uint64(buf[:])
}

func (r *fuzzReader) int() int { return int(r.u64()) }

func (r *fuzzReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

// FuzzAccounting decodes operands for every checked operation and budget
// formula, then a Counter start value and a sequence of Counter steps.
func FuzzAccounting(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		if msg := checkAccountingArithmetic(r.u64(), r.u64(), r.int(), r.int(), r.int()); msg != "" {
			t.Fatal(msg)
		}
		if msg := checkBudgets(r.u64(), r.u64(), r.u64(), r.int(), r.int()); msg != "" {
			t.Fatal(msg)
		}
		start := r.u64()
		var steps []counterStep
		for len(r.data) > 0 && len(steps) < 64 {
			steps = append(steps, counterStep{Kind: int(r.byte() % 5), N: r.u64(), Cap: r.u64()})
		}
		if msg := checkCounterOps(start, steps); msg != "" {
			t.Fatal(msg)
		}
	})
}
