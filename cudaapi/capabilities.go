package cudaapi

import (
	"fmt"
	"strings"
)

// Feature is an optional group of driver entry points that a driver may or
// may not offer.
type Feature int

// The optional features Capabilities reports.
const (
	// FeatureBatchedCopies is MemcpyBatchAsync (cuMemcpyBatchAsync_v2, CUDA 13.0).
	FeatureBatchedCopies Feature = iota
	// FeatureMemoryPools is stream-ordered allocation: MemAllocAsync,
	// MemFreeAsync and the MemPool calls (CUDA 11.2).
	FeatureMemoryPools
	// FeatureGraphs is stream capture and graph instantiation, upload and
	// launch, with GraphInstantiateWithFlags (CUDA 11.4).
	FeatureGraphs
	// FeatureConditionalGraphNodes is conditional (IF/WHILE) graph nodes,
	// found by cuGraphConditionalHandleCreate (CUDA 12.3).
	FeatureConditionalGraphNodes
	// FeatureVirtualMemory is virtual memory management: MemAddressReserve,
	// MemCreate, MemMap, MemSetAccess and their inverses (CUDA 10.2).
	FeatureVirtualMemory
	// FeaturePeerAccess is peer copies and peer access between contexts:
	// DeviceCanAccessPeer, CtxEnablePeerAccess, MemcpyPeerAsync (CUDA 4.0).
	FeaturePeerAccess
	// FeatureProgrammaticLaunch is programmatic dependent launch:
	// LaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
	// (cuLaunchKernelEx, CUDA 11.8), from a CUDA 12.3 driver, the first to
	// keep such launches as programmatic edges when a stream is captured
	// into a graph. Devices of compute capability 9.0 and newer honour it.
	FeatureProgrammaticLaunch

	numFeatures
)

// featureNames are the names String and vyrecuda info print.
var featureNames = [numFeatures]string{
	"batched copies", "stream-ordered memory pools", "graphs", "conditional graph nodes",
	"virtual memory management", "peer access", "programmatic dependent launch",
}

// String returns the feature's name, e.g. "graphs".
func (f Feature) String() string {
	if f < 0 || f >= numFeatures {
		return fmt.Sprintf("Feature(%d)", int(f))
	}
	return featureNames[f]
}

// Features lists every feature Capabilities reports, in a stable order.
func Features() []Feature {
	out := make([]Feature, numFeatures)
	for i := range out {
		out[i] = Feature(i)
	}
	return out
}

// Capabilities is what the loaded driver offers beyond the core API, found
// from symbol lookup and cuDriverGetVersion. It says what the driver library
// exports, not what a particular device supports: a device may still refuse
// memory pools, virtual memory or peer access (see the device attributes).
type Capabilities struct {
	// DriverVersion is cuDriverGetVersion's answer: 1000*major + 10*minor.
	DriverVersion int
	missing       [numFeatures]error // nil where the feature is offered
}

// Has reports whether the driver offers f.
func (c Capabilities) Has(f Feature) bool {
	return f >= 0 && f < numFeatures && c.DriverVersion > 0 && c.missing[f] == nil
}

// Why returns why f is not offered (usually a *MissingSymbolError), or nil
// when it is.
func (c Capabilities) Why(f Feature) error {
	if f < 0 || f >= numFeatures {
		return fmt.Errorf("cudaapi: unknown feature %d", int(f))
	}
	if c.DriverVersion <= 0 && c.missing[f] == nil {
		return fmt.Errorf("cudaapi: the driver's version is unknown: %w", ErrDriverNotFound)
	}
	return c.missing[f]
}

// String lists the offered features, e.g. "CUDA 13.0 driver: graphs, peer access".
func (c Capabilities) String() string {
	if c.DriverVersion <= 0 {
		return "no driver: no optional features"
	}
	var have []string
	for _, f := range Features() {
		if c.Has(f) {
			have = append(have, f.String())
		}
	}
	if len(have) == 0 {
		have = []string{"no optional features"}
	}
	return formatCUDA(c.DriverVersion) + " driver: " + strings.Join(have, ", ")
}

// featureNeeds is what one feature needs: a driver version and symbols.
type featureNeeds struct {
	since int
	procs []*proc
}

// DriverCapabilities loads the driver if needed and reports which optional
// features it offers. It fails only when the driver cannot be loaded or
// cuDriverGetVersion fails; a missing feature is not an error.
func DriverCapabilities() (Capabilities, error) {
	return capabilities(DriverGetVersion)
}

// capabilities is DriverCapabilities with the version query injected (tests).
func capabilities(version func() (int32, error)) (Capabilities, error) {
	v, err := version()
	if err != nil {
		return Capabilities{}, err
	}
	c := Capabilities{DriverVersion: int(v)}
	needs := featureTable()
	for f := range c.missing {
		n := needs[f]
		for _, p := range n.procs {
			if _, err := p.Find(); err != nil {
				c.missing[f] = err
				break
			}
		}
		if c.missing[f] == nil && c.DriverVersion < n.since {
			c.missing[f] = fmt.Errorf("cudaapi: %s needs a driver for %s or newer, the loaded one is for %s",
				Feature(f), formatCUDA(n.since), formatCUDA(c.DriverVersion))
		}
	}
	return c, nil
}
