//go:build !cgo

package cudaapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNoCgoEveryCallReturnsDriverNotFound(t *testing.T) {
	assert.ErrorIs(t, Loaded(), ErrDriverNotFound)
	assert.ErrorIs(t, Init(0), ErrDriverNotFound)
	d, err := MemAlloc(1)
	assert.Zero(t, d)
	assert.ErrorIs(t, err, ErrDriverNotFound)
	name, err := DeviceGetName(0)
	assert.Empty(t, name)
	assert.ErrorIs(t, err, ErrDriverNotFound)
	k, err := NewKernelParams(2)
	assert.Nil(t, k)
	assert.ErrorIs(t, err, ErrDriverNotFound)
	_, err = ModuleLoadImage([]byte("ptx"))
	assert.ErrorIs(t, err, ErrDriverNotFound)
}
