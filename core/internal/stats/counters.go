// Package stats owns the live transfer counters of a Backend: the atomic
// counts each transfer, dispatch and synchronization adds to, and the
// snapshot and reset core's Telemetry reads through.
//
// It counts and nothing else: it must not import core, decide what a
// transfer counts as, or hold anything but the numbers. Core's public
// Telemetry type is converted from Snapshot, so the two keep the same
// fields.
package stats

import "sync/atomic"

// Counters are the live counters behind a Backend's Telemetry. Each is
// updated atomically on its own; a snapshot is not a single atomic cut
// across them. The zero value is ready and counts from zero.
type Counters struct {
	H2DBytes, D2HBytes        atomic.Uint64 // bytes copied host to device, device to host
	UploadOps, ReadbackOps    atomic.Uint64 // calls that moved at least one byte
	SyncPoints                atomic.Uint64 // host waits on the device
	ResidentAllocBytes        atomic.Uint64 // bytes allocated for resident buffers
	DeviceCopies, Requested   atomic.Uint64 // driver copies queued after fusion, copies requested before it
	MemsetOps, KernelLaunches atomic.Uint64 // device memsets and kernels queued
	PackedLaunches            atomic.Uint64 // scatter, gather and copy kernels of transfers
	Collectives               atomic.Uint64 // collective calls the device took part in
}

// Snapshot is the counters' values at one moment. Its fields are those of
// core.Telemetry, which converts from it.
type Snapshot struct {
	HostToDeviceBytes       uint64
	DeviceToHostBytes       uint64
	UploadOps               uint64
	ReadbackOps             uint64
	SyncPoints              uint64
	ResidentAllocationBytes uint64
	DeviceCopies            uint64
	RequestedCopies         uint64
	MemsetOps               uint64
	KernelLaunches          uint64
	PackedLaunches          uint64
	Collectives             uint64
}

// Snapshot reads every counter.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{
		HostToDeviceBytes:       c.H2DBytes.Load(),
		DeviceToHostBytes:       c.D2HBytes.Load(),
		UploadOps:               c.UploadOps.Load(),
		ReadbackOps:             c.ReadbackOps.Load(),
		SyncPoints:              c.SyncPoints.Load(),
		ResidentAllocationBytes: c.ResidentAllocBytes.Load(),
		DeviceCopies:            c.DeviceCopies.Load(),
		RequestedCopies:         c.Requested.Load(),
		MemsetOps:               c.MemsetOps.Load(),
		KernelLaunches:          c.KernelLaunches.Load(),
		PackedLaunches:          c.PackedLaunches.Load(),
		Collectives:             c.Collectives.Load(),
	}
}

// Reset sets every counter to zero.
func (c *Counters) Reset() {
	for _, v := range c.all() {
		v.Store(0)
	}
}

// all lists every counter, in Snapshot's field order.
func (c *Counters) all() []*atomic.Uint64 {
	return []*atomic.Uint64{&c.H2DBytes, &c.D2HBytes, &c.UploadOps, &c.ReadbackOps, &c.SyncPoints,
		&c.ResidentAllocBytes, &c.DeviceCopies, &c.Requested, &c.MemsetOps, &c.KernelLaunches, &c.PackedLaunches,
		&c.Collectives}
}
