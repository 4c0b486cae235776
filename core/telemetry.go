package core

// Telemetry is a snapshot of a Backend's transfer counters since it was opened
// or last reset.
type Telemetry struct {
	HostToDeviceBytes       uint64 // bytes copied host to device
	DeviceToHostBytes       uint64 // bytes copied device to host
	UploadOps               uint64 // upload calls that moved at least one byte
	ReadbackOps             uint64 // readback calls that moved at least one byte
	SyncPoints              uint64 // host waits on the device (stream or event synchronizations)
	ResidentAllocationBytes uint64 // bytes allocated for resident buffers
	DeviceCopies            uint64 // driver copy operations queued after fusion
	RequestedCopies         uint64 // copies requested before fusion
	MemsetOps               uint64 // device memsets queued
	KernelLaunches          uint64 // kernels launched
	PackedLaunches          uint64 // kernels that move transfers' data: the scatter and gather of packed transfers, and copy kernels writing reads into pinned memory or staging (WithKernelReads); not in KernelLaunches
	// Collectives counts the collective calls of this Backend's device:
	// collective steps of batches and graph replays when queued, Group and
	// Comm collectives (and the exchanges of WithCollectiveChecks) when
	// their fence returns.
	Collectives uint64
}
