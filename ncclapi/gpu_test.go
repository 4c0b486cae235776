//go:build gpu

package ncclapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPULoadsRealLibrary loads the machine's libnccl and calls through it:
// the version query, then a one-device communicator on device 0.
func TestGPULoadsRealLibrary(t *testing.T) {
	require.NoError(t, Loaded())
	v, err := GetVersion()
	require.NoError(t, err)
	t.Logf("NCCL_VERSION_CODE %d (bindings from %d)", v, HeaderVersion)
	assert.GreaterOrEqual(t, v, int32(20000), "NCCL 2 codes are major*10000 + minor*100 + patch")

	comms := make([]Comm, 1)
	require.NoError(t, CommInitAll(comms, []int32{0}))
	assert.NotZero(t, comms[0])
	require.NoError(t, CommDestroy(comms[0]))
}
