package core

import "sync/atomic"

// telemetryCounters are the live counters behind Telemetry. Each is updated
// atomically on its own; a snapshot is not a single atomic cut across them.
type telemetryCounters struct {
	h2dBytes, d2hBytes        atomic.Uint64
	uploadOps, readbackOps    atomic.Uint64
	syncPoints                atomic.Uint64
	residentAllocBytes        atomic.Uint64
	deviceCopies, requested   atomic.Uint64
	memsetOps, kernelLaunches atomic.Uint64
	packedLaunches            atomic.Uint64
}

func (c *telemetryCounters) snapshot() Telemetry {
	return Telemetry{
		HostToDeviceBytes:       c.h2dBytes.Load(),
		DeviceToHostBytes:       c.d2hBytes.Load(),
		UploadOps:               c.uploadOps.Load(),
		ReadbackOps:             c.readbackOps.Load(),
		SyncPoints:              c.syncPoints.Load(),
		ResidentAllocationBytes: c.residentAllocBytes.Load(),
		DeviceCopies:            c.deviceCopies.Load(),
		RequestedCopies:         c.requested.Load(),
		MemsetOps:               c.memsetOps.Load(),
		KernelLaunches:          c.kernelLaunches.Load(),
		PackedLaunches:          c.packedLaunches.Load(),
	}
}

func (c *telemetryCounters) reset() {
	for _, v := range []*atomic.Uint64{&c.h2dBytes, &c.d2hBytes, &c.uploadOps, &c.readbackOps,
		&c.syncPoints, &c.residentAllocBytes, &c.deviceCopies, &c.requested, &c.memsetOps, &c.kernelLaunches, &c.packedLaunches} {
		v.Store(0)
	}
}

// Telemetry returns a snapshot of the transfer counters since Open or the
// last ResetTelemetry. It works on a closed Backend too.
func (b *Backend) Telemetry() Telemetry {
	if b == nil {
		return Telemetry{}
	}
	return b.tel.snapshot()
}

// ResetTelemetry sets every transfer counter to zero.
func (b *Backend) ResetTelemetry() {
	if b != nil {
		b.tel.reset()
	}
}
