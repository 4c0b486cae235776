package capture

import (
	"fmt"
	"sort"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
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
// staging the captured copies read, on up to Workers goroutines (the
// calling one among them) when the spans lie apart. The caller owns Stage
// and the bytes of Ups and keeps them valid (their lengths unchanged)
// while the Graph lives. The zero Pack copies nothing.
type Pack struct {
	Stage   []byte
	Ups     []fusion.UploadCopy
	Spans   []Span
	Workers int
	Linger  time.Duration
	// CopyFn copies one upload's bytes and Fence ends a goroutine's copies
	// (nil: the built-in copy, no fence).
	CopyFn func(dst, src []byte)
	Fence  func()
	// apart says no two spans overlap (set by Prepare), so they may be
	// copied in any order.
	apart bool
	// ends[i] is the bytes of spans [0, i], for splitting among workers.
	ends []int
}

// packParallelMin is the bytes from which Copy splits the spans among
// goroutines: one thread copies about 10 GB/s, so 4 MiB took about 0.4 ms.
const packParallelMin = 256 << 10

// packPiece is the unit Copy splits the bytes into among goroutines, so
// one large upload is copied by many (whole cache lines).
const packPiece = 16 << 10

// Prepare readies p for Copy once its fields are set.
func (p *Pack) Prepare() {
	p.ends = make([]int, len(p.Spans))
	total := 0
	for i, s := range p.Spans {
		total += len(p.Ups[s.Src].Data)
		p.ends[i] = total
	}
	p.apart = spansApart(p.Spans, p.Ups)
}

// Copy copies the current bytes of each upload to its span of Stage, in
// order where spans overlap (the later upload wins). (A fused copy that
// merges several uploads holds the bytes they had when it was fused, so
// the staging cannot be packed from the fused copies.)
func (p *Pack) Copy() {
	n := len(p.Spans)
	if !p.apart || p.Workers <= 1 || n == 0 || p.ends[n-1] < packParallelMin {
		p.copySpans(0, n)
		return
	}
	// Spans that lie apart may be copied in any order: the goroutines
	// split the bytes of all of them laid end to end in pieces, so a
	// single large upload is split too (copied by one goroutine, a 2 MiB
	// upload took a graph replay about 70 us longer than Run's staged
	// copy on an H200 host).
	total := p.ends[n-1]
	pieces := (total + packPiece - 1) / packPiece
	copyjob.ForParts(pieces, p.Workers, p.Linger, func(i int) int { return i * packPiece }, total, func(lo, hi int) {
		p.copyBytes(lo*packPiece, min(hi*packPiece, total))
	})
}

// copyBytes copies bytes [lo, hi) of the spans' uploads laid end to end
// (Prepare's ends), each to its place in the staging.
func (p *Pack) copyBytes(lo, hi int) {
	cp := p.CopyFn
	if cp == nil {
		cp = func(dst, src []byte) { copy(dst, src) }
	}
	for i := sort.SearchInts(p.ends, lo+1); i < len(p.Spans) && lo < hi; i++ {
		s, d := p.Spans[i], p.Ups[p.Spans[i].Src].Data
		begin := p.ends[i] - len(d)
		a, z := lo-begin, min(hi, p.ends[i])-begin
		cp(p.Stage[s.Off+a:s.Off+z], d[a:z])
		lo = p.ends[i]
	}
	if p.Fence != nil {
		p.Fence()
	}
}

// copySpans copies spans [lo, hi).
func (p *Pack) copySpans(lo, hi int) {
	if p.CopyFn == nil {
		for _, s := range p.Spans[lo:hi] {
			copy(p.Stage[s.Off:], p.Ups[s.Src].Data)
		}
		return
	}
	for _, s := range p.Spans[lo:hi] {
		d := p.Ups[s.Src].Data
		p.CopyFn(p.Stage[s.Off:s.Off+len(d)], d)
	}
	if p.Fence != nil {
		p.Fence()
	}
}

// spansApart reports whether no two spans overlap in the staging.
func spansApart(spans []Span, ups []fusion.UploadCopy) bool {
	idx := make([]int, len(spans))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return spans[idx[a]].Off < spans[idx[b]].Off })
	end := 0
	for k, i := range idx {
		if k > 0 && spans[i].Off < end {
			return false
		}
		end = spans[i].Off + len(ups[spans[i].Src].Data)
	}
	return true
}

// Layout maps each of ups onto the staging that the fused copies fused
// read, laid out back to back in order, or, when starts is not nil, fused
// copy k at starts[k]: an upload lands in the fused copy
// of its handle whose range holds it, at its distance from that copy's
// start. Spans come in the order of ups, so copying each upload's bytes to
// its span in that order leaves every fused range holding what applying
// the uploads in order would leave (the later upload wins where two
// overlap), and fusing covers every byte of a fused range with some
// upload. Empty uploads get no span. It fails with KindInvalidArgument
// when an upload lies in no fused copy, which fusion.FuseUploads never
// produces.
func Layout(op string, ups, fused []fusion.UploadCopy, starts []int) ([]Span, error) {
	spans, err := layout(ups, fused, starts)
	if err != nil {
		return nil, &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Err: err,
			Detail: "the batch's uploads do not map onto their fused copies",
			Fix:    "report this as a bug; Run the batch instead meanwhile"}
	}
	return spans, nil
}

func layout(ups, fused []fusion.UploadCopy, starts []int) ([]Span, error) {
	if starts == nil {
		starts = make([]int, len(fused))
		off := 0
		for k, c := range fused {
			starts[k] = off
			off += len(c.Data)
		}
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
