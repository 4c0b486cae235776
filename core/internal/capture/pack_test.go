package capture_test

import (
	"bytes"
	"errors"
	"math/rand"
	"sync"
	"testing"

	"github.com/vyre-go/vyrecuda/core/internal/capture"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/fusion"
)

// TestUploadLayoutLeavesWhatApplyingInOrderLeaves checks, on random
// uploads that overlap, touch and repeat, that packing each upload's
// current bytes at its span and copying the fused ranges from the staging
// leaves device memory as applying the uploads one by one in order does,
// also after every upload's bytes changed since the layout was found.
func TestUploadLayoutLeavesWhatApplyingInOrderLeaves(t *testing.T) {
	r := rand.New(rand.NewSource(15))
	const handles, span = 3, 64
	for trial := 0; trial < 500; trial++ {
		ups := make([]fusion.UploadCopy, 1+r.Intn(12))
		for i := range ups {
			h := uint64(r.Intn(handles))
			off := r.Intn(span)
			n := r.Intn(span - off + 1)
			ups[i] = fusion.UploadCopy{Handle: h, Dst: h<<32 | uint64(off), Data: make([]byte, n)}
			r.Read(ups[i].Data)
		}
		fused, total, err := fusion.FuseUploads(ups)
		if err != nil {
			t.Fatal(err)
		}
		spans, err := capture.Layout("Capture", ups, fused, nil)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for round := 0; round < 2; round++ {
			if round > 0 { // the caller changes the bytes, never the lengths
				for i := range ups {
					r.Read(ups[i].Data)
				}
			}
			// The model: device memory after the uploads in order.
			want := make([][]byte, handles)
			got := make([][]byte, handles)
			for h := range want {
				want[h] = make([]byte, span)
				got[h] = make([]byte, span)
			}
			for _, u := range ups {
				copy(want[u.Handle][u.Dst&0xffffffff:], u.Data)
			}
			stage := bytes.Repeat([]byte{0xee}, int(total))
			(&capture.Pack{Stage: stage, Ups: ups, Spans: spans}).Copy()
			off := 0
			for _, c := range fused {
				copy(got[c.Handle][c.Dst&0xffffffff:], stage[off:off+len(c.Data)])
				off += len(c.Data)
			}
			for h := range want {
				if !bytes.Equal(want[h], got[h]) {
					t.Fatalf("trial %d round %d handle %d:\n got %x\nwant %x", trial, round, h, got[h], want[h])
				}
			}
		}
	}
}

func TestUploadLayoutRefusesAnUploadOutsideTheFusedCopies(t *testing.T) {
	ups := []fusion.UploadCopy{{Handle: 1, Dst: 100, Data: make([]byte, 8)}}
	for _, fused := range [][]fusion.UploadCopy{
		nil,
		{{Handle: 2, Dst: 100, Data: make([]byte, 8)}},
		{{Handle: 1, Dst: 104, Data: make([]byte, 8)}},
		{{Handle: 1, Dst: 96, Data: make([]byte, 8)}},
		{{Handle: 1, Dst: 100, Data: make([]byte, 4)}},
	} {
		if _, err := capture.Layout("Capture", ups, fused, nil); !errors.Is(err, errs.ErrInvalidArgument) {
			t.Errorf("fused %v: error %v, want an invalid argument", fused, err)
		}
	}
	if s, err := capture.Layout("Capture", ups, []fusion.UploadCopy{{Handle: 0, Dst: 0, Data: make([]byte, 3)}, {Handle: 1, Dst: 96, Data: make([]byte, 12)}}, nil); err != nil || len(s) != 1 || s[0] != (capture.Span{Src: 0, Off: 7}) {
		t.Errorf("spans %v, %v; want one at offset 3+4", s, err)
	}
}

// TestPackCopyOnManyGoroutinesLeavesWhatOneLeaves packs uploads that lie
// apart (one large upload among them, or alone), on one goroutine and on
// several, and checks both stagings hold the same bytes, each upload's at
// its span, with every goroutine's copies fenced.
func TestPackCopyOnManyGoroutinesLeavesWhatOneLeaves(t *testing.T) {
	r := rand.New(rand.NewSource(16))
	for trial := 0; trial < 60; trial++ {
		ups := make([]fusion.UploadCopy, 1+r.Intn(5))
		dst := uint64(0)
		for i := range ups {
			n := r.Intn(64 << 10)
			if i == 0 || r.Intn(3) == 0 {
				n = 256<<10 + r.Intn(1<<20) // large enough to be split
			}
			if r.Intn(6) == 0 {
				n = 0
			}
			ups[i] = fusion.UploadCopy{Handle: 1, Dst: dst, Data: make([]byte, n)}
			r.Read(ups[i].Data)
			dst += uint64(n) + uint64(r.Intn(3)) // apart, sometimes touching
		}
		fused, total, err := fusion.FuseUploads(ups)
		if err != nil {
			t.Fatal(err)
		}
		spans, err := capture.Layout("Capture", ups, fused, nil)
		if err != nil {
			t.Fatal(err)
		}
		one := bytes.Repeat([]byte{0xee}, int(total))
		serial := capture.Pack{Stage: one, Ups: ups, Spans: spans, Workers: 1}
		serial.Prepare()
		serial.Copy()
		many := bytes.Repeat([]byte{0xee}, int(total))
		var mu sync.Mutex
		copied, fences := 0, 0
		p := capture.Pack{Stage: many, Ups: ups, Spans: spans, Workers: 1 + r.Intn(6),
			CopyFn: func(dst, src []byte) {
				copy(dst, src)
				mu.Lock()
				copied += len(src)
				mu.Unlock()
			},
			Fence: func() { mu.Lock(); fences++; mu.Unlock() }}
		p.Prepare()
		p.Copy()
		if !bytes.Equal(one, many) {
			t.Fatalf("trial %d (%d workers): the stagings differ", trial, p.Workers)
		}
		want := 0
		for _, u := range ups {
			want += len(u.Data)
		}
		if copied != want || fences == 0 {
			t.Fatalf("trial %d: copied %d bytes (want each upload's once, %d) with %d fences", trial, copied, want, fences)
		}
	}
}
