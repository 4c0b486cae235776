package core

import (
	"fmt"
	"sort"

	"github.com/vyre-go/vyrecuda/fusion"
)

// uploadSpan places one upload of a captured batch in the graph's upload
// staging: the bytes of upload src (an index into the plan's non-empty
// uploads) go at staging offset off.
type uploadSpan struct {
	src int
	off int
}

// uploadLayout maps each of ups onto the staging that the fused copies
// fused read, laid out back to back in order as transfer.StageUploads lays
// them out: an upload lands in the fused copy of its handle whose range
// holds it, at its distance from that copy's start. Spans come in the order of ups, so
// copying each upload's bytes to its span in that order leaves every fused
// range holding what applying the uploads in order would leave (the later
// upload wins where two overlap), and fusing covers every byte of a fused
// range with some upload. It fails when an upload lies in no fused copy,
// which FuseUploads never produces.
func uploadLayout(ups, fused []fusion.UploadCopy) ([]uploadSpan, error) {
	starts := make([]int, len(fused))
	off := 0
	for k, c := range fused {
		starts[k] = off
		off += len(c.Data)
	}
	spans := make([]uploadSpan, 0, len(ups))
	for i, u := range ups {
		if len(u.Data) == 0 {
			continue
		}
		// The last fused copy at or before (handle, dst): fused is ordered
		// by handle, then address, and its copies of a handle are disjoint.
		k := sort.Search(len(fused), func(k int) bool {
			c := fused[k]
			return c.Handle > u.Handle || c.Handle == u.Handle && c.Dst > u.Dst
		}) - 1
		if k < 0 || fused[k].Handle != u.Handle || u.Dst-fused[k].Dst > uint64(len(fused[k].Data)-len(u.Data)) ||
			len(u.Data) > len(fused[k].Data) {
			return nil, fmt.Errorf("upload %d (%d bytes at %#x) lies in no fused copy", i, len(u.Data), u.Dst)
		}
		spans = append(spans, uploadSpan{src: i, off: starts[k] + int(u.Dst-fused[k].Dst)})
	}
	return spans, nil
}

// packSpans copies the current bytes of each upload to its span of stage,
// in order.
func packSpans(stage []byte, ups []fusion.UploadCopy, spans []uploadSpan) {
	for _, s := range spans {
		copy(stage[s.off:], ups[s.src].Data)
	}
}
