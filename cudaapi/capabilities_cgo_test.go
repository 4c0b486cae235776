//go:build cgo

package cudaapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everySymbol is a fake library exporting every symbol the bindings know,
// except those in without.
func everySymbol(without ...string) *fakeLibrary {
	lib := &fakeLibrary{symbols: map[string]uintptr{}}
	for i, p := range driver.Procs() {
		for _, n := range p.Names() {
			lib.symbols[n] = uintptr(0x1000 + i)
		}
	}
	for _, n := range without {
		delete(lib.symbols, n)
	}
	return lib
}

func version(v int32) func() (int32, error) { return func() (int32, error) { return v, nil } }

// headerHasBatch is whether the cuda.h the bindings came from declares
// cuMemcpyBatchAsync_v2: without it, batched copies are never offered.
const headerHasBatch = HeaderVersion >= 13000

func TestCapabilitiesAllOffered(t *testing.T) {
	useFake(t, everySymbol(), nil)
	c, err := capabilities(version(13000))
	require.NoError(t, err)
	assert.Equal(t, 13000, c.DriverVersion)
	for _, f := range Features() {
		want := f != FeatureBatchedCopies || headerHasBatch
		assert.Equal(t, want, c.Has(f), f.String())
		assert.Equal(t, want, c.Why(f) == nil, f.String())
	}
	if headerHasBatch {
		assert.Equal(t, "CUDA 13.0 driver: batched copies, stream-ordered memory pools, graphs, conditional graph nodes, virtual memory management, peer access, programmatic dependent launch", c.String())
	}
}

func TestCapabilitiesDegradePerFeature(t *testing.T) {
	tests := []struct {
		without string
		lost    Feature
	}{
		{"cuMemcpyBatchAsync_v2", FeatureBatchedCopies},
		{"cuMemAllocAsync", FeatureMemoryPools},
		{"cuMemPoolTrimTo", FeatureMemoryPools},
		{"cuGraphInstantiateWithFlags", FeatureGraphs},
		{"cuGraphConditionalHandleCreate", FeatureConditionalGraphNodes},
		{"cuMemCreate", FeatureVirtualMemory},
		{"cuMemcpyPeerAsync", FeaturePeerAccess},
		{"cuLaunchKernelEx", FeatureProgrammaticLaunch},
	}
	for _, tt := range tests {
		t.Run(tt.without, func(t *testing.T) {
			useFake(t, everySymbol(tt.without), nil)
			c, err := capabilities(version(13000))
			require.NoError(t, err)
			for _, f := range Features() {
				assert.Equal(t, f != tt.lost && (f != FeatureBatchedCopies || headerHasBatch), c.Has(f), f.String())
			}
			var ms *MissingSymbolError
			require.True(t, errors.As(c.Why(tt.lost), &ms), "got %v", c.Why(tt.lost))
			assert.Equal(t, tt.without, ms.Symbol)
		})
	}
}

func TestCapabilitiesOlderDriverVersion(t *testing.T) {
	// An old driver that somehow exports the symbols still does not offer
	// what its version predates.
	useFake(t, everySymbol(), nil)
	c, err := capabilities(version(11080))
	require.NoError(t, err)
	assert.False(t, c.Has(FeatureBatchedCopies))
	assert.False(t, c.Has(FeatureConditionalGraphNodes))
	assert.False(t, c.Has(FeatureProgrammaticLaunch), "captured programmatic launches need CUDA 12.3")
	assert.True(t, c.Has(FeatureGraphs))
	assert.True(t, c.Has(FeatureMemoryPools))
	assert.ErrorContains(t, c.Why(FeatureConditionalGraphNodes), "conditional graph nodes needs a driver for CUDA 12.3 or newer, the loaded one is for CUDA 11.8")
}

func TestCapabilitiesWithoutDriver(t *testing.T) {
	useFake(t, nil, ErrDriverNotFound)
	c, err := DriverCapabilities()
	require.ErrorIs(t, err, ErrDriverNotFound)
	for _, f := range Features() {
		assert.False(t, c.Has(f))
		assert.ErrorIs(t, c.Why(f), ErrDriverNotFound)
	}
	assert.Equal(t, "no driver: no optional features", c.String())
}

func TestFeatureNames(t *testing.T) {
	assert.Equal(t, "graphs", FeatureGraphs.String())
	assert.Equal(t, "Feature(99)", Feature(99).String())
	assert.False(t, Capabilities{DriverVersion: 13000}.Has(Feature(-1)))
	assert.Error(t, Capabilities{}.Why(Feature(99)))
}
