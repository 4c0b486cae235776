package proptest

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/sim"
)

// expectStaged checks a single copy that moved in several DMAs: a staged
// plan, one DMA per chunk and one wait for each chunk's stream before its
// staging block is reused or the call returns, no launch. Telemetry counts
// each chunk as a device copy and each wait as a sync point (the caller
// counted one already).
func (r *runner) expectStaged(call string, got map[sim.Op]uint64, op sim.Op) error {
	dmas := got[op]
	if got[sim.OpStreamSynchronize] < dmas || got[sim.OpLaunch] != 0 {
		return fmt.Errorf("%s (staged): device calls %v", call, got)
	}
	countOutcome(call+" (staged)", succeeded)
	r.m.tel.DeviceCopies += dmas
	r.m.tel.SyncPoints += dmas - 1
	return r.expectTransfer(call+" (staged)", map[sim.Op]uint64{op: dmas, sim.OpStreamSynchronize: dmas, sim.OpLaunch: 0})
}
