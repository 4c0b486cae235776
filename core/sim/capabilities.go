package sim

import "github.com/vyre-go/vyrecuda/core"

// Capabilities reports the optional features the simulated driver offers:
// Config.Capabilities, or DefaultCapabilities. It implements
// core.CapabilityReporter. A nil Device offers none.
func (d *Device) Capabilities() core.Capabilities {
	if d == nil {
		return core.Capabilities{}
	}
	return d.caps
}
