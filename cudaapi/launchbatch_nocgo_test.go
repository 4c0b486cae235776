//go:build !cgo

package cudaapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLaunchBatchWithoutCgo(t *testing.T) {
	var b LaunchBatch
	assert.ErrorIs(t, b.Reset(1, 1), ErrDriverNotFound)
	for _, programmatic := range []bool{false, true} {
		at, err := launchBatch(nil, nil, 1, programmatic)
		assert.Equal(t, 0, at)
		assert.ErrorIs(t, err, ErrDriverNotFound)
	}
}
