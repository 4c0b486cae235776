package core_test

import (
	"testing"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/coretest"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestConformanceSim runs the Driver conformance suite on the simulated
// device, with sim's own leak report on top of the suite's free-memory check.
func TestConformanceSim(t *testing.T) {
	coretest.Run(t, func(t *testing.T) core.Driver {
		dev := sim.New(sim.Config{TotalMemory: 256 << 20})
		t.Cleanup(func() { sim.RequireNoLeaks(t, dev) })
		return dev
	})
}
