package core

// Telemetry returns a snapshot of the transfer counters since Open or the
// last ResetTelemetry. It works on a closed Backend too.
func (b *Backend) Telemetry() Telemetry {
	if b == nil {
		return Telemetry{}
	}
	return Telemetry(b.tel.Snapshot())
}

// ResetTelemetry sets every transfer counter to zero.
func (b *Backend) ResetTelemetry() {
	if b != nil {
		b.tel.Reset()
	}
}
