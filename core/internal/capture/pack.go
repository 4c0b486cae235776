package capture

import (
	"fmt"
	"sort"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/fusion"
)

// Span places one upload of a captured batch in the graph's upload
// staging: the bytes of upload Src (an index into the uploads given to
// Layout) go at staging offset Off.
type Span struct {
	Src int
	Off int
}

// Pack is the packed upload table of a Graph: before every launch, Copy
// copies the current bytes of each of Ups to its span of Stage, the
// staging the captured copies read. The caller owns Stage and the bytes of
// Ups and keeps them valid (their lengths unchanged) while the Graph lives.
// The zero Pack copies nothing.
type Pack struct {
	Stage []byte
	Ups   []fusion.UploadCopy
	Spans []Span
}

// Copy copies the current bytes of each upload to its span of Stage, in
// order. (A fused copy that merges several uploads holds the bytes they
// had when it was fused, so the staging cannot be packed from the fused
// copies.)
func (p *Pack) Copy() {
	for _, s := range p.Spans {
		copy(p.Stage[s.Off:], p.Ups[s.Src].Data)
	}
}

// Layout maps each of ups onto the staging that the fused copies fused
// read, laid out back to back in order: an upload lands in the fused copy
// of its handle whose range holds it, at its distance from that copy's
// start. Spans come in the order of ups, so copying each upload's bytes to
// its span in that order leaves every fused range holding what applying
// the uploads in order would leave (the later upload wins where two
// overlap), and fusing covers every byte of a fused range with some
// upload. Empty uploads get no span. It fails with KindInvalidArgument
// when an upload lies in no fused copy, which fusion.FuseUploads never
// produces.
func Layout(op string, ups, fused []fusion.UploadCopy) ([]Span, error) {
	spans, err := layout(ups, fused)
	if err != nil {
		return nil, &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Err: err,
			Detail: "the batch's uploads do not map onto their fused copies",
			Fix:    "report this as a bug; Run the batch instead meanwhile"}
	}
	return spans, nil
}

func layout(ups, fused []fusion.UploadCopy) ([]Span, error) {
	starts := make([]int, len(fused))
	off := 0
	for k, c := range fused {
		starts[k] = off
		off += len(c.Data)
	}
	spans := make([]Span, 0, len(ups))
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
		spans = append(spans, Span{Src: i, Off: starts[k] + int(u.Dst-fused[k].Dst)})
	}
	return spans, nil
}
