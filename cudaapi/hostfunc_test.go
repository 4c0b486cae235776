package cudaapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLaunchHostFuncRefusesNil(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{}}
	useFake(t, lib, nil)
	err := LaunchHostFunc(0, nil)
	require.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE)
	assert.Contains(t, err.Error(), "Fix:")
	assert.Empty(t, lib.lookups, "refused before the driver is asked")
}
