package core

// Capabilities reports the optional features the Backend's driver offers,
// as the driver reports them (the real driver asks once, when it is opened).
// A nil Backend, or a driver that does not implement CapabilityReporter,
// offers none.
func (b *Backend) Capabilities() Capabilities {
	if b == nil {
		return Capabilities{}
	}
	if cr, ok := b.drv.(CapabilityReporter); ok {
		return cr.Capabilities()
	}
	return Capabilities{}
}
