//go:build cgo

package cudaapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLaunchHostFuncWithoutDriverOrSymbol(t *testing.T) {
	ran := false
	useFake(t, nil, ErrDriverNotFound)
	assert.ErrorIs(t, LaunchHostFunc(0, func() { ran = true }), ErrDriverNotFound)

	useFake(t, &fakeLibrary{symbols: map[string]uintptr{}}, nil)
	err := LaunchHostFunc(0, func() { ran = true })
	var ms *MissingSymbolError
	require.True(t, errors.As(err, &ms), "got %v", err)
	assert.Equal(t, "cuLaunchHostFunc", ms.Symbol)
	assert.False(t, ran)
}
