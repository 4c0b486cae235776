package proptest

// Upload steps of the core.Backend state machine: UploadSlice and Upload of
// one range or of many, with the model's verdict and bookkeeping they share.

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// upItem is one resolved upload.
type upItem struct {
	h    core.Buffer
	off  int
	data []byte
}

// predictUploads is the model's verdict for a batch of uploads: every handle
// is validated before any range (UnknownHandle first), then every item's
// length or range (InvalidArgument).
func (r *runner) predictUploads(items []upItem, full bool) core.Kind {
	for _, it := range items {
		if !r.m.valid(it.h) {
			return core.KindUnknownHandle
		}
	}
	for _, it := range items {
		if full && len(it.data) != it.h.Len || !full && !rangeOK(it.off, len(it.data), it.h.Len) {
			return core.KindInvalidArgument
		}
	}
	return 0
}

// doUploads runs a validated-and-judged upload call and updates the model.
func (r *runner) doUploads(call string, items []upItem, full bool, do func() error) error {
	want := r.predictUploads(items, full)
	for _, it := range items {
		r.logf("%s item %+v off=%d n=%d", call, it.h, it.off, len(it.data))
	}
	// A packed transfer stages through a device allocation outside the
	// resident budget, which a nearly full device may not have.
	r.allowOOM = len(items) >= packMinCopies
	r.packable = r.allowOOM
	err := do()
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		return r.noCalls(call + " rejected")
	case faulted:
		// Copies queued before the failure may have landed: the model
		// forgets every destination byte of the batch, nothing else.
		for _, it := range items {
			r.m.forget(it.h.ID, span{it.off, it.off + len(it.data)})
			r.failedTargets(it.h.ID, span{it.off, it.off + len(it.data)})
		}
		return nil
	}
	byHandle := make(map[uint64][]span)
	nonEmpty := 0
	for _, it := range items {
		if len(it.data) == 0 {
			continue
		}
		nonEmpty++
		byHandle[it.h.ID] = append(byHandle[it.h.ID], span{it.off, it.off + len(it.data)})
		r.m.write(it.h.ID, it.off, it.data)
	}
	if nonEmpty == 0 {
		return r.noCalls(call + " with nothing to move")
	}
	moved, copies := unionStats(byHandle)
	t := &r.m.tel
	t.HostToDeviceBytes += moved
	t.UploadOps++
	t.SyncPoints++
	t.RequestedCopies += uint64(nonEmpty)
	if err := r.expectPath(call, copies, sim.OpMemcpyHtoDAsync); err != nil {
		return err
	}
	for id := range byHandle {
		if err := r.audit(id); err != nil {
			return err
		}
	}
	return nil
}

// uploadStep is UploadSlice (a whole-buffer upload: exactly the buffer's
// length) with data of the handle's length plus delta.
type uploadStep struct {
	withFault
	pick, delta, seed int
}

func (s *uploadStep) setFault(f *faultSpec) { s.f = f }
func (s *uploadStep) String() string {
	return fmt.Sprintf("upload(%d delta=%d seed=%d)%s", s.pick, s.delta, s.seed, s.faultString())
}

func (s *uploadStep) run(r *runner) error {
	h := r.pick(s.pick)
	data := patternData(s.seed, h.Len+s.delta)
	return r.doUploads("UploadSlice", []upItem{{h, 0, data}}, true, func() error { return core.UploadSlice(r.b, h, data) })
}

// uploadAtStep is Upload of one range.
type uploadAtStep struct {
	withFault
	pick int
	at   place
	seed int
}

func (s *uploadAtStep) setFault(f *faultSpec) { s.f = f }
func (s *uploadAtStep) String() string {
	return fmt.Sprintf("uploadAt(%d %+v seed=%d)%s", s.pick, s.at, s.seed, s.faultString())
}

func (s *uploadAtStep) run(r *runner) error {
	h := r.pick(s.pick)
	off, n := s.at.resolve(h.Len)
	data := patternData(s.seed, n)
	return r.doUploads("Upload", []upItem{{h, off, data}}, false, func() error { return r.b.Upload(core.UploadAt{Buf: h, Offset: off, Data: data}) })
}

// uploadManyStep is Upload of several buffers from offset 0, with data of
// each one's length plus a delta (a short one writes a prefix, a long one
// is refused); picks repeat, so later uploads of a buffer overwrite earlier
// ones.
type uploadManyStep struct {
	withFault
	picks, deltas, seeds []int
}

// drawUploadMany draws a batch of whole-buffer uploads, some with a delta.
func drawUploadMany(src entropy) *uploadManyStep {
	n := drawCount(src)
	s := &uploadManyStep{picks: drawPicks(src, n), deltas: make([]int, n), seeds: make([]int, n)}
	for i := range s.deltas {
		if chance(src, 30) {
			s.deltas[i] = drawDelta(src)
		}
		s.seeds[i] = src.intn(1 << 16)
	}
	return s
}

func (s *uploadManyStep) setFault(f *faultSpec) { s.f = f }
func (s *uploadManyStep) String() string {
	return fmt.Sprintf("uploadMany(picks=%v deltas=%v seeds=%v)%s", s.picks, s.deltas, s.seeds, s.faultString())
}

func (s *uploadManyStep) run(r *runner) error {
	items := make([]upItem, len(s.picks))
	ups := make([]core.UploadAt, len(s.picks))
	for i, p := range s.picks {
		h := r.pick(p)
		items[i] = upItem{h, 0, patternData(s.seeds[i], h.Len+s.deltas[i])}
		ups[i] = core.UploadAt{Buf: h, Data: items[i].data}
	}
	return r.doUploads("Upload", items, false, func() error { return r.b.Upload(ups...) })
}

// uploadAtManyStep is Upload of several ranges, with overlapping and
// repeated destinations.
type uploadAtManyStep struct {
	withFault
	picks []int
	ats   []place
	seeds []int
}

// drawUploadAtMany draws a batch of range uploads, now and then a wide one
// for the packed path.
func drawUploadAtMany(src entropy) *uploadAtManyStep {
	n := drawCount(src)
	s := &uploadAtManyStep{}
	if chance(src, 12) {
		s.picks, s.ats = drawWide(src)
		n = len(s.picks)
	} else {
		s.picks, s.ats = drawPicks(src, n), drawPlaces(src, n, false)
	}
	s.seeds = make([]int, n)
	for i := range s.seeds {
		s.seeds[i] = src.intn(1 << 16)
	}
	return s
}

func (s *uploadAtManyStep) setFault(f *faultSpec) { s.f = f }
func (s *uploadAtManyStep) String() string {
	return fmt.Sprintf("uploadAtMany(picks=%v ats=%v seeds=%v)%s", s.picks, s.ats, s.seeds, s.faultString())
}

func (s *uploadAtManyStep) run(r *runner) error {
	items := make([]upItem, len(s.picks))
	ups := make([]core.UploadAt, len(s.picks))
	for i, p := range s.picks {
		h := r.pick(p)
		off, n := s.ats[i].resolve(h.Len)
		items[i] = upItem{h, off, patternData(s.seeds[i], n)}
		ups[i] = core.UploadAt{Buf: h, Offset: off, Data: items[i].data}
	}
	return r.doUploads("Upload", items, false, func() error { return r.b.Upload(ups...) })
}
