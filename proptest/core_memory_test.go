package proptest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The memory manager's statements, checked by the state machine and by a
// liveness property of their own:
//
//   - Trim gives every cached device and pinned staging block back: after it
//     MemoryStats' CachedDevice and CachedPinned are 0 and the device holds
//     exactly Reserved bytes; it changes no live buffer.
//   - MemoryStats agrees with the device (Reserved) and between two
//     readings with no call in between; peaks
//     are never below the current values, and ResetPeakMemoryStats sets
//     them to the current values.
//   - An allocation served from the cache (no MemAlloc) makes no driver
//     call at all.
//   - Liveness: once everything is freed, an allocation of any size up to
//     the total budget succeeds, whatever was allocated and freed before.

// memoryStep is Backend.Trim or a MemoryStats check, with or without
// ResetPeakMemoryStats.
type memoryStep struct {
	trim, reset bool
}

func drawMemory(src entropy) step {
	return &memoryStep{trim: chance(src, 50), reset: chance(src, 30)}
}

func (s *memoryStep) String() string { return fmt.Sprintf("memory(trim=%v reset=%v)", s.trim, s.reset) }

func (s *memoryStep) run(r *runner) error {
	if r.cfg.shared {
		// Other goroutines allocate and free at the same time: only the
		// call's own success can be checked.
		if s.trim {
			_, verr := r.judge("Trim", r.b.Trim(), 0) // random faults may fail it
			return verr
		}
		return nil
	}
	before := r.b.MemoryStats()
	if s.trim {
		if err := r.trim(before); err != nil {
			return err
		}
	}
	if s.reset {
		r.b.ResetPeakMemoryStats()
		st := r.b.MemoryStats()
		if st.PeakAllocated != st.Allocated || st.PeakReserved != st.Reserved {
			return fmt.Errorf("after ResetPeakMemoryStats the peaks are not the current values: %+v", st)
		}
	}
	return r.checkMemoryStats()
}

// trim runs Trim and checks what it promises.
func (r *runner) trim(before core.MemoryStats) error {
	err := r.b.Trim()
	if _, verr := r.judge("Trim", err, 0); verr != nil {
		return verr
	}
	dc, pc := r.b.MemoryStats().CachedDevice, r.b.MemoryStats().CachedPinned
	if dc != 0 || pc != 0 {
		return fmt.Errorf("after Trim the cached bytes are (%d device, %d pinned)", dc, pc)
	}
	st := r.b.MemoryStats()
	if st.Allocated != before.Allocated || st.Reserved != before.Reserved-before.CachedDevice {
		return fmt.Errorf("Trim changed what is in use: %+v -> %+v", before, st)
	}
	// Trim itself never retries the quarantine: every call counts.
	got := r.callsDelta()
	if got[sim.OpMemFree] != st.DeviceFrees-before.DeviceFrees {
		return fmt.Errorf("Trim made %d MemFree calls but counts %d device frees", got[sim.OpMemFree], st.DeviceFrees-before.DeviceFrees)
	}
	want := map[sim.Op]uint64{}
	for _, op := range []sim.Op{sim.OpMemFree, sim.OpHostFree} {
		if got[op] > 0 {
			want[op] = got[op]
		}
	}
	return r.expectCalls("Trim", want)
}

// checkMemoryStats checks MemoryStats against the device and against a
// second reading.
func (r *runner) checkMemoryStats() error {
	st := r.b.MemoryStats()
	again := r.b.MemoryStats()
	dc, pc := again.CachedDevice, again.CachedPinned
	live := r.dev.Live()
	switch {
	case st.Allocated != again.Allocated:
		return fmt.Errorf("MemoryStats.Allocated %d, then %d", st.Allocated, again.Allocated)
	case st.CachedDevice != dc || st.CachedPinned != pc:
		return fmt.Errorf("MemoryStats cached (%d, %d), then (%d, %d)", st.CachedDevice, st.CachedPinned, dc, pc)
	case st.PeakAllocated < st.Allocated || st.PeakReserved < st.Reserved:
		return fmt.Errorf("a peak is below its current value: %+v", st)
	case st.Reserved > st.Budget || st.Budget != budgetTotal(r.cfg.total):
		return fmt.Errorf("reserved %d, budget %d (want %d)", st.Reserved, st.Budget, budgetTotal(r.cfg.total))
	case st.Reserved < st.CachedDevice+st.Allocated:
		return fmt.Errorf("reserved %d is less than %d cached plus %d allocated", st.Reserved, st.CachedDevice, st.Allocated)
	case st.CachedPinned > st.ReservedPinned:
		return fmt.Errorf("cached pinned %d exceeds reserved pinned %d", st.CachedPinned, st.ReservedPinned)
	}
	if r.b.LaunchResourceCounts().Quarantined == 0 && r.gen == 0 {
		// Every device byte is the Backend's (a reopened Backend may share
		// the device with what a failed Close left behind).
		if live.DeviceBytes != st.Reserved {
			return fmt.Errorf("the device holds %d bytes, MemoryStats.Reserved is %d", live.DeviceBytes, st.Reserved)
		}
		if uint64(live.Allocations) != st.DeviceAllocs-st.DeviceFrees {
			return fmt.Errorf("the device holds %d allocations, %d device allocs - %d frees", live.Allocations, st.DeviceAllocs, st.DeviceFrees)
		}
	}
	return nil
}

// expectAllocCalls checks a successful allocation's driver calls: only
// memory calls, and none at all when it was served from the cache.
func (r *runner) expectAllocCalls(call string) error {
	if r.cfg.shared {
		return nil
	}
	got := r.callsDelta()
	if got[sim.OpMemAlloc] == 0 && len(got) > 0 && r.armed == nil {
		return fmt.Errorf("%s served from the cache made driver calls %v", call, got)
	}
	for op := range got {
		if op != sim.OpMemAlloc && op != sim.OpMemFree && op != sim.OpMemGetInfo {
			return fmt.Errorf("%s made driver calls %v", call, got)
		}
	}
	return nil
}

// noteFreed remembers the length of a freed buffer for later allocations.
func (r *runner) noteFreed(n int) {
	const keep = 16
	if len(r.freedLens) == keep {
		copy(r.freedLens, r.freedLens[1:])
		r.freedLens = r.freedLens[:keep-1]
	}
	r.freedLens = append(r.freedLens, n)
}

// reuseLen picks the length of a buffer freed lately, or size when none was.
func (r *runner) reuseLen(size int) int {
	if len(r.freedLens) == 0 {
		return size
	}
	return r.freedLens[max(size, 0)%len(r.freedLens)]
}

// recoveredOOM reports whether the armed fault was an out-of-memory failure
// of MemAlloc, which an allocation answers by giving cached memory back and
// trying again: the call may then succeed although the fault fired.
func (r *runner) recoveredOOM() bool {
	return r.armed != nil && r.armed.op == sim.OpMemAlloc && !r.armed.null && r.armed.code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY
}

// budgetRefusal reports whether e is a refusal for lack of room that a
// driver out-of-memory result caused (the Backend reports those as
// ErrBudget, with the driver's code).
func budgetRefusal(e *core.Error) bool {
	return e.Kind == core.KindBudget && e.Code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY
}

// TestCoreLivenessAfterFreeingEverything: allocate and free buffers of
// random sizes (some uploaded to, so pinned staging is cached too), free
// everything, and every allocation up to the total budget must succeed,
// one byte more must fail with ErrBudget.
func TestCoreLivenessAfterFreeingEverything(t *testing.T) {
	props := gopter.NewProperties(propParameters(t, 60))
	props.Property("after everything is freed, any size up to the budget can be allocated", prop.ForAll(
		func(totalSel, capSel, limitSel uint8, ops []uint32, final uint32) string {
			if err := livenessRun(totalSel, capSel, limitSel, ops, final); err != nil {
				return err.Error()
			}
			return ""
		},
		gen.UInt8(), gen.UInt8(), gen.UInt8(), gen.SliceOfN(24, gen.UInt32()), gen.UInt32(),
	))
	props.TestingRun(t)
}

func livenessRun(totalSel, capSel, limitSel uint8, ops []uint32, final uint32) error {
	total := []uint64{1 << 20, 1_000_000, 4 << 20, 16 << 20}[totalSel%4]
	opts := []core.Option{
		core.WithDevicePoolCap([]uint64{0, 64 << 10, 1 << 30}[capSel%3]),
		core.WithResidentPoolLimit([]int{-1, 64 << 10, 1 << 30}[limitSel%3]),
	}
	dev := sim.New(sim.Config{TotalMemory: total})
	b, err := core.Open(dev, opts...)
	if err != nil {
		return err
	}
	var live []core.Buffer
	for _, w := range ops {
		if w%3 == 0 && len(live) > 0 {
			i := int(w/3) % len(live)
			if err := b.Free(live[i]); err != nil {
				return fmt.Errorf("Free: %v", err)
			}
			live = append(live[:i], live[i+1:]...)
			continue
		}
		n := 1 + int(uint64(w>>2)%(total/3))
		if w%5 == 1 {
			n = 1 + int(w>>2)%4096
		}
		h, err := b.Alloc(n)
		if errors.Is(err, core.ErrBudget) {
			continue
		} else if err != nil {
			return fmt.Errorf("Alloc(%d): %v", n, err)
		}
		if w%7 == 2 {
			if err := b.Upload(core.UploadAt{Buf: h, Offset: 0, Data: pattern[:min(n, 4096)]}); err != nil {
				return fmt.Errorf("Upload: %v", err)
			}
		}
		live = append(live, h)
	}
	for _, h := range live {
		if err := b.Free(h); err != nil {
			return fmt.Errorf("Free: %v", err)
		}
	}
	budget := budgetTotal(total)
	for _, n := range []uint64{budget, 1 + uint64(final)%budget, budget - uint64(final)%16} {
		h, err := b.Alloc(int(n))
		if err != nil {
			return fmt.Errorf("after everything was freed, Alloc(%d) with a budget of %d: %v", n, budget, err)
		}
		if err := b.Free(h); err != nil {
			return err
		}
	}
	if _, err := b.Alloc(int(budget) + 1); !errors.Is(err, core.ErrBudget) {
		return fmt.Errorf("Alloc(budget+1) = %v, want ErrBudget", err)
	}
	if err := b.Close(); err != nil {
		return err
	}
	if l := dev.Live(); !l.Zero() {
		return fmt.Errorf("after Close the device holds %+v", l)
	}
	return nil
}
