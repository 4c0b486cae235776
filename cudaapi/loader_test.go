package cudaapi

import (
	"errors"
	"fmt"
	"strings"
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

func (f *fakeLibrary) Lookup(name string) (uintptr, error) {
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
	restore := driver.Swap(func() (library, error) {
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
	p := driver.NewProc(0, "cuCtxGetCurrent")

	for i := 0; i < 3; i++ {
		_, err := p.Find()
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
			p := driver.NewProc(0, tt.symbol)
			a, err := p.Find()
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

// versionedLibrary is a fakeLibrary that also reports a driver version.
type versionedLibrary struct {
	*fakeLibrary
	version int
}

func (v versionedLibrary) driverVersion() int { return v.version }

func TestLoaderMissingSymbolCarriesVersions(t *testing.T) {
	lib := versionedLibrary{&fakeLibrary{symbols: map[string]uintptr{}}, 12040}
	useFake(t, lib, nil)
	p := driver.NewProc(12080, "cuNew_v2", "cuNew")
	_, err := p.Find()
	var ms *MissingSymbolError
	require.True(t, errors.As(err, &ms), "got %v", err)
	assert.Equal(t, "cuNew_v2", ms.Symbol)
	assert.Equal(t, []string{"cuNew"}, ms.Fallbacks)
	assert.Equal(t, 12080, ms.Since)
	assert.Equal(t, 12040, ms.Driver)
	assert.Zero(t, ms.Header)
	assert.Equal(t, "cudaapi: the loaded libcuda (driver for CUDA 12.4) has no cuNew_v2 nor cuNew, which appeared in CUDA 12.8: "+
		"fake: undefined symbol cuNew_v2; Fix: install an NVIDIA driver for CUDA 12.8 or newer, or avoid this call there", err.Error())
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix:"))
}

func TestLoaderUndeclaredProcNeverLooksUp(t *testing.T) {
	lib := &fakeLibrary{symbols: map[string]uintptr{"cuFromNewerHeader": 5}}
	useFake(t, lib, nil)
	p := driver.NewUndeclaredProc(13000, "cuFromNewerHeader")
	_, err := p.Find()
	var ms *MissingSymbolError
	require.True(t, errors.As(err, &ms), "got %v", err)
	assert.Equal(t, HeaderVersion, ms.Header)
	assert.Equal(t, 13000, ms.Since)
	assert.Zero(t, lib.lookups["cuFromNewerHeader"], "the header lacked it: its C signature is not trusted")
	assert.Contains(t, err.Error(), "regenerate the bindings from the header of CUDA 13.0 or newer")
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix:"))
}

func TestLoaderUndeclaredProcWithoutDriver(t *testing.T) {
	useFake(t, nil, ErrDriverNotFound)
	p := driver.NewUndeclaredProc(13000, "cuFromNewerHeader")
	_, err := p.Find()
	assert.ErrorIs(t, err, ErrDriverNotFound, "no driver is reported before a missing symbol")
}

func TestFormatCUDA(t *testing.T) {
	for v, want := range map[int]string{13000: "CUDA 13.0", 12040: "CUDA 12.4", 11080: "CUDA 11.8", 2020: "CUDA 2.2", 0: "an unknown CUDA version", -1: "an unknown CUDA version"} {
		assert.Equal(t, want, formatCUDA(v), v)
	}
}

func TestMissingSymbolErrorOtherLibrary(t *testing.T) {
	e := &MissingSymbolError{Library: "libnvrtc", Symbol: "nvrtcGetLTOIR", Since: 12000, Driver: 11080}
	assert.Equal(t, "cudaapi: the loaded libnvrtc (CUDA 11.8) has no nvrtcGetLTOIR, which appeared in CUDA 12.0; "+
		"Fix: install the libnvrtc for CUDA 12.0 or newer, or avoid this call there", e.Error())
	assert.ErrorIs(t, e, ErrMissingSymbol)
}
