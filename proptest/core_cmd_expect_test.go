package proptest

// The device-call expectations the state machine's steps share: which
// driver calls a successful transfer may make, plain or packed.

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/sim"
)

// expectPath checks the device calls and telemetry of a successful upload or
// readback of the given fused copies. Below packMinCopies core takes the
// plain path: one driver copy per fused copy (op) and one fence. From there
// it may pack: one scatter or gather launch, a few DMAs and one fence; the
// exact DMA count is a tuning, so the model then checks that DeviceCopies
// counts exactly the copies the device saw and PackedLaunches the launch.
func (r *runner) expectPath(call string, copies int, op sim.Op) error {
	t := &r.m.tel
	if r.cfg.shared && copies >= packMinCopies {
		// Either path; the totals are bounded at the end.
		r.m.packable++
	}
	if copies == 1 {
		if r.cfg.shared {
			r.m.stageable++
		} else if got := r.callsDelta(); got[op] > 1 {
			return r.expectStaged(call, got, op)
		}
	}
	if r.cfg.shared || copies < packMinCopies {
		t.DeviceCopies += uint64(copies)
		return r.expectTransfer(call, map[sim.Op]uint64{op: uint64(copies), sim.OpStreamSynchronize: 1, sim.OpLaunch: 0})
	}
	got := r.callsDelta()
	if got[sim.OpLaunch] == 0 {
		t.DeviceCopies += uint64(copies)
		return r.expectTransfer(call+" (plain)", map[sim.Op]uint64{op: uint64(copies), sim.OpStreamSynchronize: 1})
	}
	dmas := got[sim.OpMemcpyHtoDAsync] + got[sim.OpMemcpyDtoHAsync]
	countOutcome(call+" (packed)", succeeded)
	t.DeviceCopies += dmas
	t.PackedLaunches++
	// A packed upload moves its data in one DMA per planned part (at most one
	// per copy) after its table; a packed readback brings its data back in
	// one DMA or in parts, and its table goes up with a DMA of its own only
	// where the device does not map pinned host memory.
	if dmas == 0 || dmas > uint64(copies)+1 || got[op] == 0 {
		return fmt.Errorf("%s (packed): device calls %v", call, got)
	}
	if op == sim.OpMemcpyDtoHAsync && got[sim.OpMemcpyHtoDAsync] != r.cfg.tableDMAs() {
		return fmt.Errorf("%s (packed): %d table DMAs with unmapped=%v: device calls %v", call, got[sim.OpMemcpyHtoDAsync], r.cfg.unmapped, got)
	}
	if parts := got[sim.OpMemcpyDtoHAsync]; parts > 1 {
		// A readback in parts learns from an event after each part that
		// the part landed (each landing a sync point) and synchronizes no
		// stream.
		t.SyncPoints += parts - 1
		if got[sim.OpEventQuery] < parts {
			return fmt.Errorf("%s (packed in %d parts): device calls %v", call, parts, got)
		}
		return r.expectTransfer(call+" (packed in parts)", map[sim.Op]uint64{sim.OpLaunch: 1, sim.OpStreamSynchronize: 0,
			sim.OpMemcpyHtoDAsync: r.cfg.tableDMAs(), sim.OpMemcpyDtoHAsync: parts, sim.OpEventRecord: parts, sim.OpEventQuery: got[sim.OpEventQuery]})
	}
	return r.expectTransfer(call+" (packed)", map[sim.Op]uint64{sim.OpLaunch: 1, sim.OpStreamSynchronize: 1,
		sim.OpMemcpyHtoDAsync: got[sim.OpMemcpyHtoDAsync], sim.OpMemcpyDtoHAsync: got[sim.OpMemcpyDtoHAsync]})
}

// expectTransfer checks a successful call's device calls: the transfer and
// synchronization calls exactly as given, and none but resource calls
// (pooled staging and device memory, lease streams and events, whose count
// depends on pool state the model does not track) besides.
func (r *runner) expectTransfer(what string, exact map[sim.Op]uint64) error {
	if r.cfg.shared {
		return nil
	}
	got := r.callsDelta()
	r.dropRetries(got, exact)
	for op, n := range got {
		if _, ok := exact[op]; !ok && !resourceOps[op] {
			return fmt.Errorf("%s: device calls %v; %v is not expected", what, got, op)
		}
		_ = n
	}
	for op, n := range exact {
		if got[op] != n {
			return fmt.Errorf("%s: device calls %v, want %v exactly %d time(s)", what, got, op, n)
		}
	}
	return nil
}

// resourceOps are the device calls expectTransfer lets a call make any
// number of times, besides the ones it names exactly.
var resourceOps = map[sim.Op]bool{
	sim.OpMemAlloc: true, sim.OpMemFree: true, sim.OpHostAlloc: true, sim.OpHostFree: true,
	// The device cache reads free memory when it must allocate (memory.go).
	sim.OpMemGetInfo:   true,
	sim.OpStreamCreate: true, sim.OpStreamDestroy: true, sim.OpEventCreate: true, sim.OpEventDestroy: true,
	// A Backend loads a program's module on its first dispatch.
	sim.OpModuleLoad: true, sim.OpModuleFunction: true, sim.OpBindHostKernel: true,
}
