//go:build cgo

package ncclapi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMissingSymbolFailsOnlyThatCall(t *testing.T) {
	lib := &fakeLib{syms: map[string]uintptr{}}
	restore := library.Swap(func() (opened, error) { return lib, nil })
	defer restore()
	require.NoError(t, Loaded())
	err := GroupStart()
	var ms *MissingSymbolError
	require.ErrorAs(t, err, &ms)
	assert.Equal(t, "ncclGroupStart", ms.Symbol)
	assert.ErrorIs(t, err, ErrMissingSymbol)
	assert.Contains(t, err.Error(), "Fix: ")
	assert.Contains(t, err.Error(), fmt.Sprint(HeaderVersion))
}

func TestLengthMismatchBeforeLoading(t *testing.T) {
	opens := 0
	restore := library.Swap(func() (opened, error) { opens++; return &fakeLib{}, nil })
	defer restore()
	err := CommInitAll(make([]Comm, 2), []int32{0})
	require.ErrorIs(t, err, InvalidArgument)
	assert.Contains(t, err.Error(), "len(devlist) = 1")
	assert.Zero(t, opens, "refused before the library was opened")
}
