package cuda

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// deviceCapabilities reports the optional features device dev offers: what
// the driver library exports (cudaapi.DriverCapabilities), narrowed by the
// device's own attributes and peers. A failed query takes that one feature
// away; it never fails the caller.
func deviceCapabilities(dev cudaapi.Device) driver.Capabilities {
	c, err := cudaapi.DriverCapabilities()
	if err != nil {
		return driver.Capabilities{}
	}
	caps := narrowCapabilities(c, deviceAttrTrue(dev), peerOf(dev))
	// Programmatic dependent launch needs compute capability 9.0.
	major, err := cudaapi.DeviceGetAttribute(cudaapi.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
	caps.ProgrammaticLaunch = caps.ProgrammaticLaunch && err == nil && major >= driver.ProgrammaticLaunchCCMajor
	return caps
}

// narrowCapabilities maps the driver's features to Capabilities and keeps
// memory pools, virtual memory and peer access only where the device agrees;
// mapped pinned host memory comes from the device's attributes alone.
func narrowCapabilities(c cudaapi.Capabilities, attr func(cudaapi.DeviceAttribute) bool, anyPeer func() bool) driver.Capabilities {
	caps := driver.Capabilities{
		DriverVersion:         c.DriverVersion,
		BatchedCopies:         c.Has(cudaapi.FeatureBatchedCopies),
		MemoryPools:           c.Has(cudaapi.FeatureMemoryPools),
		Graphs:                c.Has(cudaapi.FeatureGraphs),
		ConditionalGraphNodes: c.Has(cudaapi.FeatureConditionalGraphNodes),
		VirtualMemory:         c.Has(cudaapi.FeatureVirtualMemory),
		PeerAccess:            c.Has(cudaapi.FeaturePeerAccess),
		ProgrammaticLaunch:    c.Has(cudaapi.FeatureProgrammaticLaunch),
	}
	caps.MemoryPools = caps.MemoryPools && attr(cudaapi.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
	caps.VirtualMemory = caps.VirtualMemory && attr(cudaapi.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
	caps.PeerAccess = caps.PeerAccess && anyPeer()
	caps.MappedPinnedHost = caps.DriverVersion > 0 && attr(cudaapi.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) &&
		attr(cudaapi.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)
	// Every CUDA driver stages small pageable copies itself, faster than a
	// DMA from pinned staging (transfer.PageableMax gives the figures).
	caps.InlineCopies = caps.DriverVersion > 0
	return caps
}

// deviceAttrTrue reads a yes/no device attribute; a failed query is no.
func deviceAttrTrue(dev cudaapi.Device) func(cudaapi.DeviceAttribute) bool {
	return func(a cudaapi.DeviceAttribute) bool {
		v, err := cudaapi.DeviceGetAttribute(a, dev)
		return err == nil && v != 0
	}
}

// peerOf reports whether dev can access any other visible device's memory.
func peerOf(dev cudaapi.Device) func() bool {
	return func() bool {
		n, err := cudaapi.DeviceGetCount()
		if err != nil {
			return false
		}
		for i := int32(0); i < n; i++ {
			other, err := cudaapi.DeviceGet(i)
			if err != nil || other == dev {
				continue
			}
			if ok, err := cudaapi.DeviceCanAccessPeer(dev, other); err == nil && ok != 0 {
				return true
			}
		}
		return false
	}
}

// Capabilities reports the optional features this device offers, found when
// the driver was opened. It implements driver.CapabilityReporter.
func (d *Driver) Capabilities() driver.Capabilities {
	if d == nil {
		return driver.Capabilities{}
	}
	return d.caps
}
