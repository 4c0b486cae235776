package proptest

// Pinned-memory steps of the core.Backend state machine: UploadAsync,
// SynchronizeUploads, AllocHostPinned, PinnedBuffer.Free, PinHostBuffer and
// UnpinHostBuffer.

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// asyncStep is UploadAsync from pinned memory (or from memory that is not
// pinned, nothing, or a range crossing the end of a pinned region).
type asyncStep struct {
	withFault
	pick    int
	at      place
	slot    int
	srcMode int // 0 inside a pinned slot, 1 crossing its end, 2 unpinned Go memory, 3 no data
	srcOff  int
	seed    int
}

// drawAsync draws an asyncStep, mostly reading from inside a pinned slot.
func drawAsync(src entropy) *asyncStep {
	s := &asyncStep{pick: src.intn(1 << 20), at: drawPlace(src, true), slot: src.intn(1 << 20), srcOff: src.intn(1 << 20), seed: src.intn(1 << 16)}
	switch r := src.intn(100); {
	case r < 8:
		s.srcMode = 1
	case r < 12:
		s.srcMode = 2
	case r < 14:
		s.srcMode = 3
	}
	return s
}

func (s *asyncStep) setFault(f *faultSpec) { s.f = f }
func (s *asyncStep) String() string {
	return fmt.Sprintf("async(%d %+v slot=%d src=%d/%d seed=%d)%s", s.pick, s.at, s.slot, s.srcMode, s.srcOff, s.seed, s.faultString())
}

func (s *asyncStep) run(r *runner) error {
	const call = "UploadAsync"
	h := r.pick(s.pick)
	off, n := s.at.resolve(h.Len)
	n = max(n, 0) // a slice has no negative length
	slot := s.pinnedSlot(r)
	as := s.source(r, slot, n)
	n = as.n
	var want core.Kind
	switch {
	case !r.m.valid(h):
		want = core.KindUnknownHandle
	case !rangeOK(off, n, h.Len):
		want = core.KindInvalidArgument
	case n == 0:
	case !as.inside:
		want = core.KindInvalidArgument
	}
	r.logf("%s(%+v, %d, src mode %d, %d)", call, h, off, as.mode, n)
	err := r.b.UploadAsync(core.UploadAt{Buf: h, Offset: off, Data: as.src})
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		return r.noCalls(call + " rejected")
	case faulted:
		r.failedTargets(h.ID, span{off, off + n})
		return nil
	}
	if n == 0 {
		return r.noCalls(call + " of nothing")
	}
	r.m.async = append(r.m.async, asyncWrite{id: h.ID, off: off, data: as.data, slot: slot})
	r.m.bufs[h.ID].asyncN++
	slot.pending++
	t := &r.m.tel
	t.HostToDeviceBytes += uint64(n)
	t.UploadOps++
	t.RequestedCopies++
	t.DeviceCopies++
	// Queued without waiting: one copy and no synchronization.
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpMemcpyHtoDAsync: 1})
}

// pinnedSlot picks the pinned slot the step reads from: mostly one pinned
// through the current Backend, else any slot ever pinned, or nil when there
// has been none.
func (s *asyncStep) pinnedSlot(r *runner) *pinSlot {
	var slot *pinSlot
	var live []*pinSlot
	for _, p := range r.m.pinned {
		if p.live && p.gen == r.gen {
			live = append(live, p)
		}
	}
	switch {
	case len(live) > 0 && s.slot%4 != 3:
		slot = live[s.slot%len(live)]
	case len(r.m.pinned) > 0:
		slot = r.m.pinned[s.slot%len(r.m.pinned)]
	}
	return slot
}

// asyncSource is the source memory an asyncStep hands UploadAsync.
type asyncSource struct {
	mode   int    // the step's srcMode, or 2 where the slot cannot serve it
	n      int    // the source's length
	src    []byte // the source
	inside bool   // src lies within memory pinned through the current Backend
	data   []byte // a copy of src's bytes when inside
}

// source builds the step's source of up to n bytes from slot (nil when none
// was ever pinned): a range inside it, one crossing its end, unpinned Go
// memory or nothing. Inside memory pinned now that no queued upload reads,
// it fills the range with the step's pattern first.
func (s *asyncStep) source(r *runner, slot *pinSlot, n int) asyncSource {
	mode := s.srcMode
	if slot == nil && mode < 2 || slot != nil && len(slot.mem) == 0 || mode == 1 && len(slot.room) <= len(slot.mem) {
		mode = 2 // a range can cross a slot's end only inside the allocation holding it
	}
	if mode == 0 && n > len(slot.mem) {
		n = len(slot.mem) // a length the slot can hold
	}
	as := asyncSource{mode: mode}
	switch mode {
	case 0, 1:
		so := 0
		mem := slot.mem
		if mode == 0 {
			so = min(s.srcOff%(len(slot.mem)-n+1), len(slot.mem)-1)
		} else {
			so = len(slot.mem) - 1 - s.srcOff%min(len(slot.mem), 4)
			mem = slot.room
			n = min(n, len(mem)-so)
		}
		as.src = mem[so : so+n]
		as.inside = slot.live && slot.gen == r.gen && so+n <= len(slot.mem)
		if as.inside {
			if slot.pending == 0 {
				fillPattern(slot.mem[so:so+n], s.seed)
			}
			as.data = bytes.Clone(slot.mem[so : so+n])
		}
	case 2:
		as.src = make([]byte, n)
	default:
		n = 0
	}
	as.n = n
	return as
}

// syncStep is SynchronizeUploads.
type syncStep struct{ withFault }

func (s *syncStep) setFault(f *faultSpec) { s.f = f }
func (s *syncStep) String() string        { return "sync()" + s.faultString() }

func (s *syncStep) run(r *runner) error {
	const call = "SynchronizeUploads"
	queued := len(r.m.async)
	r.logf("%s with %d queued", call, queued)
	err := r.b.SynchronizeUploads()
	out, verr := r.judge(call, err, 0)
	if verr != nil || out != succeeded {
		return verr
	}
	if queued == 0 {
		return r.noCalls(call + " with nothing queued")
	}
	touched := make(map[uint64]bool)
	for _, w := range r.m.async {
		touched[w.id] = true
	}
	r.m.synchronized()
	r.m.tel.SyncPoints++
	if err := r.expectTransfer(call, map[sim.Op]uint64{sim.OpStreamSynchronize: 1}); err != nil {
		return err
	}
	for id := range touched {
		if err := r.audit(id); err != nil {
			return err
		}
	}
	return nil
}

// allocPinnedStep is AllocHostPinned.
type allocPinnedStep struct {
	withFault
	size int
}

func (s *allocPinnedStep) setFault(f *faultSpec) { s.f = f }
func (s *allocPinnedStep) String() string {
	return fmt.Sprintf("allocPinned(%d)%s", s.size, s.faultString())
}

func (s *allocPinnedStep) run(r *runner) error {
	const call = "AllocHostPinned"
	var want core.Kind
	if s.size <= 0 {
		want = core.KindInvalidArgument
	}
	pb, err := r.b.AllocHostPinned(s.size)
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if pb != nil {
			return fmt.Errorf("failed %s returned a buffer", call)
		}
		if out == rejected {
			return r.noCalls(call)
		}
		return nil
	}
	mem := pb.Bytes()
	if len(mem) != s.size || pb.Len() != s.size || pb.Pointer() != unsafe.Pointer(unsafe.SliceData(mem)) {
		return fmt.Errorf("%s(%d) gave %d bytes, Len %d", call, s.size, len(mem), pb.Len())
	}
	r.m.pinned = append(r.m.pinned, &pinSlot{alloc: true, pb: pb, mem: mem, gen: r.gen, live: true})
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpHostAlloc: 1})
}

// freePinnedStep is PinnedBuffer.Free on a live, freed or closed buffer.
type freePinnedStep struct{ pick int }

func (s *freePinnedStep) String() string { return fmt.Sprintf("freePinned(%d)", s.pick) }

func (s *freePinnedStep) run(r *runner) error {
	const call = "PinnedBuffer.Free"
	var slots []*pinSlot
	for _, p := range r.m.pinned {
		if p.alloc {
			slots = append(slots, p)
		}
	}
	if len(slots) == 0 {
		return nil
	}
	p := slots[s.pick%len(slots)]
	var want core.Kind
	switch {
	case p.gen != r.gen:
		want = core.KindClosed
	case !p.live:
		want = core.KindUnknownHandle
	case p.pending > 0:
		want = core.KindInFlight
	}
	err := p.pb.Free()
	out, verr := r.judge(call, err, want)
	if verr != nil || out != succeeded {
		if verr == nil && out == rejected {
			return r.noCalls(call + " refused")
		}
		return verr
	}
	p.live = false
	if p.pb.Bytes() != nil {
		return fmt.Errorf("freed pinned buffer still returns its bytes")
	}
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpHostFree: 1})
}

// pinStep is PinHostBuffer: new Go memory (mode 0), a range overlapping one
// already pinned (1), a nil pointer (2), a non-positive length (3), or
// memory pinned before and since unpinned or closed (4).
type pinStep struct {
	withFault
	size, mode, pick int
}

func (s *pinStep) setFault(f *faultSpec) { s.f = f }
func (s *pinStep) String() string {
	return fmt.Sprintf("pin(size=%d mode=%d pick=%d)%s", s.size, s.mode, s.pick, s.faultString())
}

func (s *pinStep) run(r *runner) error {
	const call = "PinHostBuffer"
	var live, dead []*pinSlot
	for _, p := range r.m.pinned {
		switch {
		case p.live && p.gen == r.gen:
			live = append(live, p)
		case !p.alloc:
			dead = append(dead, p)
		}
	}
	mode := s.mode
	if mode == 1 && len(live) == 0 || mode == 4 && len(dead) == 0 {
		mode = 0
	}
	size := max(s.size, 1)
	var (
		ptr  unsafe.Pointer
		n    = size
		want core.Kind
		slot *pinSlot
	)
	switch mode {
	case 0:
		slot = &pinSlot{mem: make([]byte, size)}
		ptr = slot.ptr()
	case 1:
		p := live[s.pick%len(live)]
		k := s.pick % len(p.mem)
		ptr, n, want = unsafe.Pointer(&p.mem[k]), 1+s.pick%64, core.KindInvalidArgument
	case 2:
		want = core.KindInvalidArgument
	case 3:
		slot = &pinSlot{mem: make([]byte, 1)}
		ptr, n, want = slot.ptr(), -s.pick%2, core.KindInvalidArgument
	case 4:
		slot = dead[s.pick%len(dead)]
		ptr, n = slot.ptr(), len(slot.mem)
	}
	r.logf("%s(mode %d, %d)", call, mode, n)
	err := r.b.PinHostBuffer(ptr, n)
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		return r.noCalls(call + " rejected")
	case faulted:
		return nil
	}
	slot.live, slot.gen, slot.pending = true, r.gen, 0
	if mode == 0 {
		r.m.pinned = append(r.m.pinned, slot)
	}
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpHostRegister: 1})
}

// unpinStep is UnpinHostBuffer of a registered range's start (mode 0), an
// interior address (1), an AllocHostPinned buffer (2) or nil (3).
type unpinStep struct{ pick, mode int }

func (s *unpinStep) String() string { return fmt.Sprintf("unpin(%d mode=%d)", s.pick, s.mode) }

func (s *unpinStep) run(r *runner) error {
	const call = "UnpinHostBuffer"
	var regs, allocs []*pinSlot
	for _, p := range r.m.pinned {
		if p.alloc {
			allocs = append(allocs, p)
		} else {
			regs = append(regs, p)
		}
	}
	var (
		ptr  unsafe.Pointer
		slot *pinSlot
		want = core.KindInvalidArgument
	)
	switch {
	case s.mode == 0 && len(regs) > 0:
		slot = regs[s.pick%len(regs)]
		for i := range regs { // prefer one that is pinned now
			if c := regs[(s.pick+i)%len(regs)]; c.live && c.gen == r.gen {
				slot = c
				break
			}
		}
		ptr = slot.ptr()
		if slot.live && slot.gen == r.gen {
			want = 0
			if slot.pending > 0 {
				want = core.KindInFlight
			}
		}
	case s.mode == 1 && len(regs) > 0:
		p := regs[s.pick%len(regs)]
		if len(p.mem) < 2 {
			return nil
		}
		ptr = unsafe.Pointer(&p.mem[1+s.pick%(len(p.mem)-1)])
	case s.mode == 2 && len(allocs) > 0:
		ptr = allocs[s.pick%len(allocs)].ptr()
	case s.mode == 3:
	default:
		return nil
	}
	err := r.b.UnpinHostBuffer(ptr)
	out, verr := r.judge(call, err, want)
	if verr != nil || out != succeeded {
		if verr == nil && out == rejected {
			return r.noCalls(call + " refused")
		}
		return verr
	}
	slot.live = false
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpHostUnregister: 1})
}
