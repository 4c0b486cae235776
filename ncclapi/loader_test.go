package ncclapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLib resolves the names it holds; lookups are counted.
type fakeLib struct {
	syms    map[string]uintptr
	lookups int
}

func (f *fakeLib) Lookup(name string) (uintptr, error) {
	f.lookups++
	if a, ok := f.syms[name]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("no %s", name)
}

func TestNoLibraryIsErrLibraryNotFound(t *testing.T) {
	restore := library.Swap(func() (opened, error) {
		return nil, fmt.Errorf("%w: dlopen libnccl.so.2: not here", ErrLibraryNotFound)
	})
	defer restore()
	require.ErrorIs(t, Loaded(), ErrLibraryNotFound)
	_, err := GetVersion()
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.ErrorIs(t, AllReduce(1, 2, 3, Float32, Sum, 0, 0), ErrLibraryNotFound)
	_, err = GetUniqueId()
	require.ErrorIs(t, err, ErrLibraryNotFound)
}

func TestResultText(t *testing.T) {
	assert.Equal(t, "ncclInvalidUsage", InvalidUsage.Name())
	assert.Contains(t, InvalidUsage.Error(), "ncclInvalidUsage: ")
	assert.Equal(t, "ncclResult_t(99)", Result(99).Error())
	var err error = RemoteError
	var r Result
	require.True(t, errors.As(err, &r))
	assert.Equal(t, RemoteError, r)
	// The exported names carry nccl.h's values.
	assert.Equal(t, DataType(7), Float32)
	assert.Equal(t, RedOp(4), Avg)
	assert.Equal(t, DataType(9), BFloat16)
}
