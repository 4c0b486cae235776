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
