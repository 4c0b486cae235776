package proptest

import (
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// pinAroundStep pins the middle of a Go allocation, then asks to pin a
// range that starts before that region and reaches into it (to its middle,
// its end, or past it): the region then starts inside the new range, which
// PinHostBuffer must refuse as overlapping without a driver call.
type pinAroundStep struct {
	withFault
	size, pad, reach int
}

func drawPinAround(src entropy) *pinAroundStep {
	return &pinAroundStep{size: 1 + src.intn(8192), pad: 1 + src.intn(4096), reach: src.intn(3)}
}

func (s *pinAroundStep) setFault(f *faultSpec) { s.f = f }
func (s *pinAroundStep) String() string {
	return fmt.Sprintf("pinAround(size=%d pad=%d reach=%d)%s", s.size, s.pad, s.reach, s.faultString())
}

func (s *pinAroundStep) run(r *runner) error {
	const call = "PinHostBuffer"
	parent := make([]byte, s.pad+s.size+s.pad)
	slot := &pinSlot{mem: parent[s.pad : s.pad+s.size : s.pad+s.size], room: parent[s.pad:]}
	r.logf("%s(middle %d of %d)", call, s.size, len(parent))
	out, verr := r.judge(call, r.b.PinHostBuffer(slot.ptr(), s.size), 0)
	if verr != nil || out != succeeded {
		return verr
	}
	slot.live, slot.gen = true, r.gen
	r.m.pinned = append(r.m.pinned, slot)
	if err := r.expectTransfer(call, map[sim.Op]uint64{sim.OpHostRegister: 1}); err != nil {
		return err
	}
	start := (s.pad - 1) / 2
	end := []int{s.pad + 1 + (s.size-1)/2, s.pad + s.size, len(parent)}[s.reach]
	calls := r.dev.Calls(sim.OpHostRegister)
	r.logf("%s([%d,%d) around the middle [%d,%d))", call, start, end, s.pad, s.pad+s.size)
	err := r.b.PinHostBuffer(unsafe.Pointer(&parent[start]), end-start)
	if _, verr := r.judge(call, err, core.KindInvalidArgument); verr != nil {
		return fmt.Errorf("a range holding the start of a pinned region: %w", verr)
	}
	if got := r.dev.Calls(sim.OpHostRegister); got != calls {
		return fmt.Errorf("a refused overlapping %s reached the driver", call)
	}
	return nil
}
