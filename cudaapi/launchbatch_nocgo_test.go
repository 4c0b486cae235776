//go:build !cgo

package cudaapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLaunchBatchWithoutCgo(t *testing.T) {
	var b LaunchBatch
	assert.ErrorIs(t, b.Reset(1, 1), ErrDriverNotFound)
	at, err := launchBatch(nil, nil, 1)
	assert.Equal(t, 0, at)
	assert.ErrorIs(t, err, ErrDriverNotFound)
}
