package proptest

// Steps of the core.Backend state machine that manage device buffers and
// the Backend itself: Alloc, Free, ResidentDevicePtr, ResetTelemetry and
// Close-and-reopen.

import (
	"errors"
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// allocStep allocates: size bytes (rel 0), exactly what is left of the live
// budget (rel 1), more than is left (rel 2), or the length of a buffer freed
// lately (rel 3, a cache hit when the cache kept it).
type allocStep struct {
	withFault
	size int
	rel  int
}

// drawAlloc draws an allocStep: a drawn size, and now and then one of the
// sizes relative to the budget or to a freed buffer.
func drawAlloc(src entropy) *allocStep {
	s := &allocStep{size: drawSize(src)}
	switch r := src.intn(100); {
	case r < 6:
		s.rel = 1
	case r < 14:
		s.rel = 2
	case r < 40:
		s.rel = 3
	}
	return s
}

func (s *allocStep) setFault(f *faultSpec) { s.f = f }
func (s *allocStep) String() string {
	return fmt.Sprintf("alloc(size=%d rel=%d)%s", s.size, s.rel, s.faultString())
}

// remainingCap keeps "exactly the rest of the budget" allocations small
// enough to stay cheap, and every buffer below the size at which core
// pipelines a transfer through several staging blocks with a fence per block
// (16 MiB); past it the step asks for one byte too many instead.
const remainingCap = 8 << 20

func (s *allocStep) run(r *runner) error {
	const call = "Alloc"
	resident := r.b.MemoryStats().Allocated
	left := int(r.budgetLeft())
	n := s.length(r, left)
	var want core.Kind
	switch {
	case n <= 0:
		want = core.KindInvalidArgument
	case r.cfg.shared:
		// Other goroutines allocate at the same time: either outcome is
		// possible, and the total is checked at the end.
	case uint64(n) > uint64(left):
		want = core.KindBudget
	}
	// Concurrent allocations can take the memory at any time.
	r.allowOOM = n > 0 && r.cfg.shared
	r.logf("Alloc(%d) left=%d", n, left)
	h, err := r.b.Alloc(n)
	if r.cfg.shared && n > 0 && errors.Is(err, core.ErrBudget) {
		return nil
	}
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		if want == core.KindBudget {
			// It may have given cached blocks back and read free memory.
			return r.expectTransfer(call+" over budget", nil)
		}
		return r.noCalls(call + " invalid")
	case faulted:
		if h != (core.Buffer{}) {
			return fmt.Errorf("failed %s returned handle %+v", call, h)
		}
		return nil
	}
	if h.Len != n || h.ID == 0 {
		return fmt.Errorf("%s(%d) returned %+v", call, n, h)
	}
	for _, old := range r.m.order {
		if old.ID == h.ID {
			return fmt.Errorf("%s returned id %d twice", call, h.ID)
		}
	}
	if !r.cfg.shared {
		if after := r.b.MemoryStats().Allocated; after > resident+uint64(left) {
			return fmt.Errorf("resident bytes %d exceed the %d resident plus the %d left before the call", after, resident, left)
		}
		if err := r.expectAllocCalls(call); err != nil {
			return err
		}
	}
	ptr, err := r.b.ResidentDevicePtr(h)
	if err != nil || ptr == 0 {
		return fmt.Errorf("ResidentDevicePtr of a new buffer: %#x, %v", ptr, err)
	}
	r.m.bufs[h.ID] = &mbuf{h: h, ptr: ptr, data: make([]byte, n), unknown: spans{{0, n}}}
	r.m.order = append(r.m.order, h)
	r.m.tel.ResidentAllocationBytes += uint64(n)
	return nil
}

// length is the byte count the step asks for, given left bytes of budget:
// its drawn size, or one relative to the budget or to a buffer freed lately.
func (s *allocStep) length(r *runner, left int) int {
	n := s.size
	switch s.rel {
	case 1:
		n = left
		if left <= 0 || left > remainingCap {
			n = left + 1
		}
	case 2:
		n = left + 1 + max(s.size, 0)%(1<<20)
	case 3:
		n = r.reuseLen(s.size)
	}
	if r.cfg.shared && s.rel != 0 {
		// With other goroutines freeing, "more than is left" can succeed;
		// keep such buffers small enough that their transfers take one
		// fence per call, as the model assumes (see remainingCap).
		n = min(n, remainingCap)
	}
	return n
}

// freeStep frees a handle: live, freed, unknown, foreign or drifted.
type freeStep struct {
	withFault
	pick int
}

func (s *freeStep) setFault(f *faultSpec) { s.f = f }
func (s *freeStep) String() string        { return fmt.Sprintf("free(%d)%s", s.pick, s.faultString()) }

func (s *freeStep) run(r *runner) error {
	const call = "Free"
	h := r.pick(s.pick)
	var want core.Kind
	switch {
	case !r.m.valid(h):
		want = core.KindUnknownHandle
	case r.m.bufs[h.ID].inFlight():
		want = core.KindInFlight
	}
	r.logf("Free(%+v) quarantined=%v", h, r.maybeQuarantined(h.ID))
	err := r.b.Free(h)
	if want == 0 && r.maybeQuarantined(h.ID) && errors.Is(err, core.ErrInFlight) {
		// Work of a failed call that the quarantine holds may still use
		// the buffer: Free retried the quarantine, which did not
		// synchronize.
		want = core.KindInFlight
		countOutcome(call+" (quarantine held)", rejected)
	}
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		return r.noCalls(call + " refused")
	case faulted:
		// The buffer stays live and intact; a later free retries.
		return r.audit(h.ID)
	}
	delete(r.m.bufs, h.ID)
	r.noteFreed(h.Len)
	if r.cfg.poolLimit > 0 && h.Len <= r.cfg.poolLimit {
		// Cached, or freed when the cache is full (or it was an exact block).
		return r.expectTransfer(call+" pooled", nil)
	}
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpMemFree: 1})
}

// ptrStep asks for a handle's device address.
type ptrStep struct{ pick int }

func (s *ptrStep) String() string { return fmt.Sprintf("ptr(%d)", s.pick) }

func (s *ptrStep) run(r *runner) error {
	const call = "ResidentDevicePtr"
	h := r.pick(s.pick)
	var want core.Kind
	if !r.m.valid(h) {
		want = core.KindUnknownHandle
	}
	ptr, err := r.b.ResidentDevicePtr(h)
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out == succeeded && ptr != r.m.bufs[h.ID].ptr {
		return fmt.Errorf("%s(%+v) = %#x, was %#x when allocated", call, h, ptr, r.m.bufs[h.ID].ptr)
	}
	if out != succeeded && ptr != 0 {
		return fmt.Errorf("failed %s returned %#x", call, ptr)
	}
	return r.noCalls(call)
}

// resetStep is ResetTelemetry.
type resetStep struct{}

func (resetStep) String() string { return "resetTelemetry()" }

func (resetStep) run(r *runner) error {
	r.b.ResetTelemetry()
	r.m.tel = core.Telemetry{}
	return r.noCalls("ResetTelemetry")
}

// closeStep closes the Backend, first trying while uploads are queued when
// try is set (Close must refuse and change nothing), checks the device is
// empty, and opens a new Backend on the same device.
type closeStep struct{ try bool }

func (s *closeStep) String() string { return fmt.Sprintf("closeReopen(try=%v)", s.try) }

func (s *closeStep) run(r *runner) error {
	if r.cfg.shared {
		return nil
	}
	if s.try && (len(r.m.async) > 0 || len(r.m.queued()) > 0 || len(r.m.graphs) > 0) {
		err := r.b.Close()
		if _, verr := r.judge("Close", err, core.KindInFlight); verr != nil {
			return verr
		}
		if err := r.noCalls("Close refused"); err != nil {
			return err
		}
		if err := r.checkGlobal(); err != nil {
			return fmt.Errorf("after the refused Close: %w", err)
		}
	}
	if err := r.closeAndCheck(); err != nil {
		return err
	}
	return r.reopen()
}
