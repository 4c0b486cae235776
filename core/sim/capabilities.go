package sim

import "github.com/vyre-go/vyrecuda/core/driver"

// Capabilities reports the optional features the simulated driver offers:
// Config.Capabilities, or DefaultCapabilities. It implements
// driver.CapabilityReporter. A nil Device offers none.
func (d *Device) Capabilities() driver.Capabilities {
	if d == nil {
		return driver.Capabilities{}
	}
	return d.caps
}

// PlanProcs is the number of goroutines running in parallel that a Backend
// on a simulated device plans its transfers for, in place of
// runtime.GOMAXPROCS: the same program then makes the same driver calls on
// every machine, so Calls and FailNth count alike everywhere.
const PlanProcs = 4

// PlanProcs returns the package's PlanProcs. It implements
// driver.PlanProcsReporter.
func (d *Device) PlanProcs() int { return PlanProcs }
