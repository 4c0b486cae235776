package capture_test

import (
	"bytes"
	"errors"
	"math/rand"
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
