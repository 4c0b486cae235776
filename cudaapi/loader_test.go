package cudaapi

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLibrary is a symbol table standing in for libcuda.
type fakeLibrary struct {
	mu      sync.Mutex
	symbols map[string]uintptr
	lookups map[string]int
}

func (f *fakeLibrary) lookup(name string) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookups == nil {
		f.lookups = map[string]int{}
	}
	f.lookups[name]++
	if a, ok := f.symbols[name]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("fake: undefined symbol %s", name)
}

// useFake makes the loader open lib (or fail with openErr), counting opens,
// for the rest of the test.
func useFake(t *testing.T, lib library, openErr error) *int {
	t.Helper()
	opens := new(int)
	restore := driver.swap(func() (library, error) {
		*opens++
		if openErr != nil {
			return nil, openErr
		}
		return lib, nil
	})
	t.Cleanup(restore)
	return opens
}

func TestLoaderMissingLibrary(t *testing.T) {
	opens := useFake(t, nil, fmt.Errorf("%w: fake: no libcuda here", ErrDriverNotFound))
	p := &proc{names: []string{"cuCtxGetCurrent"}}

	for i := 0; i < 3; i++ {
		_, err := p.find()
		require.ErrorIs(t, err, ErrDriverNotFound)
	}
	assert.Equal(t, 1, *opens, "a failed open is remembered, not retried per call")
	assert.ErrorIs(t, Loaded(), ErrDriverNotFound)
	_, err := CtxGetCurrent()
	assert.ErrorIs(t, err, ErrDriverNotFound)
	_, err = MemAlloc(1)
	assert.ErrorIs(t, err, ErrDriverNotFound)
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY.Error(), "no driver: the name alone")
}

func TestLoaderNilLibraryIsNotFound(t *testing.T) {
	useFake(t, nil, nil)
	assert.ErrorIs(t, Loaded(), ErrDriverNotFound)
}

func TestLoaderSymbols(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"cuPresent": 0x1234, "cuZero": 0}}
	opens := useFake(t, lib, nil)
	tests := []struct {
		name    string
		symbol  string
		want    uintptr
		missing bool
	}{
		{"present symbol resolves", "cuPresent", 0x1234, false},
		{"missing symbol names itself", "cuMemcpyBatchAsync_v2", 0, true},
		{"null address counts as missing", "cuZero", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &proc{names: []string{tt.symbol}}
			a, err := p.find()
			if !tt.missing {
				require.NoError(t, err)
				assert.Equal(t, tt.want, a)
				return
			}
			require.ErrorIs(t, err, ErrMissingSymbol)
			assert.NotErrorIs(t, err, ErrDriverNotFound)
			var ms *MissingSymbolError
			require.True(t, errors.As(err, &ms))
			assert.Equal(t, tt.symbol, ms.Symbol)
			assert.Contains(t, err.Error(), tt.symbol)
			assert.Contains(t, err.Error(), "Fix:")
			assert.Zero(t, a)
		})
	}
	require.NoError(t, Loaded())
	assert.Equal(t, 1, *opens)
}

func TestLoaderCachesResolvedAddress(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"cuPresent": 0x42}}
	useFake(t, lib, nil)
	p := &proc{names: []string{"cuPresent"}}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := p.find()
			assert.NoError(t, err)
			assert.Equal(t, uintptr(0x42), a)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, lib.lookups["cuPresent"], "one dlsym per symbol")

	// A missing symbol does not disturb the others.
	_, err := (&proc{names: []string{"cuAbsent"}}).find()
	require.ErrorIs(t, err, ErrMissingSymbol)
	a, err := p.find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(0x42), a)
}

func TestLoaderSwapForgetsAddresses(t *testing.T) {
	p := driver.newProc(0, "cuSwapProbe")
	restore := driver.swap(func() (library, error) {
		return &fakeLibrary{symbols: map[string]uintptr{"cuSwapProbe": 7}}, nil
	})
	a, err := p.find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(7), a)
	restore()
	restore2 := driver.swap(func() (library, error) { return nil, ErrDriverNotFound })
	defer restore2()
	_, err = p.find()
	assert.ErrorIs(t, err, ErrDriverNotFound)
}

func TestResultNames(t *testing.T) {
	tests := []struct {
		r    Result
		want string
	}{
		{CUDA_SUCCESS, "CUDA_SUCCESS"},
		{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
		{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"},
		{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"},
		{Result(123456), "CUresult(123456)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.r.Name())
		assert.Equal(t, tt.want, tt.r.String())
	}
	// The values other packages rely on match cuda.h.
	assert.Equal(t, Result(0), CUDA_SUCCESS)
	assert.Equal(t, Result(2), CUDA_ERROR_OUT_OF_MEMORY)
	assert.Equal(t, Result(600), CUDA_ERROR_NOT_READY)
	assert.Equal(t, Result(801), CUDA_ERROR_NOT_SUPPORTED)
	var err error = CUDA_ERROR_INVALID_VALUE
	assert.ErrorIs(t, fmt.Errorf("wrapped: %w", err), CUDA_ERROR_INVALID_VALUE)
}

func TestKernelParamsRejectsBadInput(t *testing.T) {
	for _, n := range []int{-1, MaxKernelParams + 1} {
		k, err := NewKernelParams(n)
		assert.Nil(t, k)
		assert.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE)
	}
	k, err := NewKernelParams(0)
	require.NoError(t, err)
	assert.Nil(t, k.Pointer())
	assert.ErrorIs(t, k.SetUint32(0, 1), CUDA_ERROR_INVALID_VALUE)
	k.Free()
}

func TestModuleLoadImageRejectsEmpty(t *testing.T) {
	_, err := ModuleLoadImage(nil)
	assert.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE)
}
