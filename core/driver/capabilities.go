package driver

import (
	"fmt"
	"strings"
)

// Capabilities says which optional driver features a Backend's device
// offers. A Backend never needs them for its core operations (allocation,
// transfers, launches), and a failed query only takes that one feature away;
// code built on one (stream-ordered pools, graphs, several GPUs) checks it
// and reports KindUnsupported where it is missing.
type Capabilities struct {
	// DriverVersion is the driver's CUDA version, 1000*major + 10*minor
	// (13000 for CUDA 13.0); 0 when unknown.
	DriverVersion int
	// BatchedCopies: many copies in one driver call (cuMemcpyBatchAsync_v2).
	BatchedCopies bool
	// MemoryPools: stream-ordered allocation (cuMemAllocAsync, memory pools).
	MemoryPools bool
	// Graphs: stream capture and graph instantiate, upload and launch.
	Graphs bool
	// ConditionalGraphNodes: IF/WHILE nodes inside graphs.
	ConditionalGraphNodes bool
	// VirtualMemory: address reservation and mapping (cuMemCreate, cuMemMap).
	VirtualMemory bool
	// PeerAccess: this device can access another device's memory directly.
	PeerAccess bool
	// ProgrammaticLaunch: programmatic dependent launch (cuLaunchKernelEx
	// with programmatic stream serialization, kept as programmatic edges by
	// stream capture: a CUDA 12.3 driver or newer) on a device of compute
	// capability 9.0 or newer (ProgrammaticLaunchCCMajor).
	ProgrammaticLaunch bool
	// MappedPinnedHost: kernels read memory from HostAlloc at its host
	// address (unified addressing, host memory mapped into the device's
	// address space). A packed readback then hands its gather kernel the
	// table in pinned host memory instead of copying it to the device first.
	MappedPinnedHost bool
	// InlineCopies: the driver stages a copy of a few KiB from ordinary
	// host memory itself, sooner than a DMA from pinned staging, and has
	// read the bytes before MemcpyHtoDAsync returns (as CUDA does, writing
	// them into its command stream). A single small upload from Go memory
	// is then handed to MemcpyHtoDAsync as it is.
	InlineCopies bool
}

// ProgrammaticLaunchCCMajor is the first compute capability (major
// version) whose devices honour programmatic stream serialization and
// griddepcontrol; a driver reports Capabilities.ProgrammaticLaunch only for
// such a device.
const ProgrammaticLaunchCCMajor = 9

// CapabilityReporter is an optional Driver capability, found by type
// assertion: a driver that can say which optional features it offers. A
// Driver without it offers none (core's Backend.Capabilities reports the
// zero value).
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// List names each feature with whether it is offered, in a stable order.
func (c Capabilities) List() []FeatureState {
	return []FeatureState{
		{"batched copies", c.BatchedCopies},
		{"stream-ordered memory pools", c.MemoryPools},
		{"graphs", c.Graphs},
		{"conditional graph nodes", c.ConditionalGraphNodes},
		{"virtual memory management", c.VirtualMemory},
		{"peer access", c.PeerAccess},
		{"programmatic dependent launch", c.ProgrammaticLaunch},
		{"mapped pinned host memory", c.MappedPinnedHost},
	}
}

// FeatureState is one optional feature and whether it is offered.
type FeatureState struct {
	Name    string
	Offered bool
}

// String lists the offered features, e.g. "CUDA 13.0: graphs, peer access".
func (c Capabilities) String() string {
	var have []string
	for _, f := range c.List() {
		if f.Offered {
			have = append(have, f.Name)
		}
	}
	if len(have) == 0 {
		have = []string{"no optional features"}
	}
	ver := "unknown driver"
	if c.DriverVersion > 0 {
		ver = fmt.Sprintf("CUDA %d.%d", c.DriverVersion/1000, c.DriverVersion%1000/10)
	}
	return ver + ": " + strings.Join(have, ", ")
}

// CacheNotifier is an optional Driver capability, found by type assertion:
// the Backend tells it when device memory or pinned host staging goes into
// one of its caches (freed by its user but kept allocated for reuse) and
// when it comes out again. Between the two calls no kernel or copy may
// touch the memory, so a driver can refuse access the way compute-sanitizer
// would; core/sim does with Config.PoisonCache. The calls are
// notifications: they cannot fail, must not call back into the Backend, and
// may be repeated for memory already in that state.
type CacheNotifier interface {
	// MemCached reports that the n bytes of the device allocation at ptr
	// went into a cache.
	MemCached(ptr, n uint64)
	// MemReused reports that the n bytes at ptr left the cache to be used.
	MemReused(ptr, n uint64)
	// HostCached reports that buf, a block from HostAlloc, went into the
	// pinned staging cache.
	HostCached(buf []byte)
	// HostReused reports that buf left the pinned staging cache to be used.
	HostReused(buf []byte)
}
