package cudaapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatusErrorKeepsTheResultAndSparesPollingAnAllocation(t *testing.T) {
	for _, r := range []Result{CUDA_ERROR_NOT_READY, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_UNKNOWN, CUDA_ERROR_ILLEGAL_ADDRESS} {
		err := statusError(r)
		var got Result
		assert.True(t, errors.As(err, &got), "%v: errors.As finds the Result", r)
		assert.Equal(t, r, got)
		assert.ErrorIs(t, err, r)
		assert.Equal(t, r.Error(), err.Error())
	}
	allocs := testing.AllocsPerRun(100, func() {
		if statusError(CUDA_ERROR_NOT_READY) == nil {
			t.Fatal("not ready is an error")
		}
	})
	assert.Zero(t, allocs, "a not-ready query must not allocate")
}
