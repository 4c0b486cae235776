package nvrtcapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/internal/dynlib"
)

type fakeLib map[string]uintptr

func (f fakeLib) Lookup(name string) (uintptr, error) {
	if a, ok := f[name]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("no %s", name)
}

func TestCandidatesOrder(t *testing.T) {
	env := map[string]string{LibraryEnv: "/opt/my/libnvrtc.so", "CUDA_HOME": "/opt/cuda"}
	got := candidates(func(k string) string { return env[k] })
	assert.Equal(t, []string{
		"/opt/my/libnvrtc.so",
		"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
		"/opt/cuda/lib64/libnvrtc.so.13", "/opt/cuda/lib64/libnvrtc.so.12", "/opt/cuda/lib64/libnvrtc.so.11.2",
		"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.11.2",
	}, got)
	none := candidates(func(string) string { return "" })
	assert.Equal(t, "libnvrtc.so.13", none[0], "without the variable the newest soname comes first")
	assert.Len(t, none, 6)
}

func TestOpenFirst(t *testing.T) {
	var tried []string
	open := func(p string) (library, error) {
		tried = append(tried, p)
		if p == "b" {
			return fakeLib{}, nil
		}
		return nil, fmt.Errorf("%s: cannot open", p)
	}
	lib, err := openFirst([]string{"a", "b", "c"}, open)
	require.NoError(t, err)
	assert.NotNil(t, lib)
	assert.Equal(t, []string{"a", "b"}, tried, "stops at the first that loads")

	_, err = openFirst([]string{"x", "y"}, open)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrLibraryNotFound))
	assert.Contains(t, err.Error(), "x: cannot open; y: cannot open")
	assert.Equal(t, 1, countFix(err.Error()))
}

func countFix(s string) (n int) {
	for i := 0; i+4 <= len(s); i++ {
		if s[i:i+4] == "Fix:" {
			n++
		}
	}
	return n
}

func TestWrappersWithoutLibrary(t *testing.T) {
	restore := nvrtc.Swap(func() (library, error) {
		return nil, &LibraryNotFoundError{Tried: []string{"none"}, EnvName: LibraryEnv}
	})
	defer restore()
	_, _, err := Version()
	assert.ErrorIs(t, err, ErrLibraryNotFound)
	_, err = Compile(Request{Source: "__global__ void k() {}"})
	assert.ErrorIs(t, err, ErrLibraryNotFound)
	assert.ErrorIs(t, Loaded(), ErrLibraryNotFound)
}

func TestMissingSymbol(t *testing.T) {
	if !dynlib.HaveCgo {
		t.Skip("without cgo every wrapper returns ErrLibraryNotFound")
	}
	restore := nvrtc.Swap(func() (library, error) { return fakeLib{}, nil })
	defer restore()
	_, err := SupportedArchs()
	var ms *MissingSymbolError
	require.ErrorAs(t, err, &ms)
	assert.Equal(t, "nvrtcGetNumSupportedArchs", ms.Symbol)
	assert.Equal(t, 11020, ms.Since)
	assert.Contains(t, err.Error(), "appeared in CUDA 11.2")
	assert.ErrorIs(t, err, ErrMissingSymbol)
	assert.Equal(t, 1, countFix(err.Error()))
}

func TestUndeclaredProcNeverLooksUp(t *testing.T) {
	restore := nvrtc.Swap(func() (library, error) { return fakeLib{"nvrtcX": 1}, nil })
	defer restore()
	p := nvrtc.NewUndeclaredProc(13000, "nvrtcX")
	_, err := p.Find()
	var ms *MissingSymbolError
	require.ErrorAs(t, err, &ms)
	assert.True(t, ms.Undeclared)
	assert.Contains(t, err.Error(), "not in these bindings")
	assert.Equal(t, 1, countFix(err.Error()))
	q := nvrtc.NewProc(13000, "nvrtcX")
	a, err := q.Find()
	require.NoError(t, err)
	assert.Equal(t, uintptr(1), a)
}

func TestResultError(t *testing.T) {
	assert.Equal(t, "nvrtc: NVRTC_ERROR_COMPILATION (6)", NVRTC_ERROR_COMPILATION.Error())
	assert.Equal(t, "nvrtc: unknown nvrtcResult 999", Result(999).Error())
	ce := &CompileError{Err: NVRTC_ERROR_COMPILATION, Log: "k.cu(3): error: expected a \";\"\n"}
	assert.ErrorIs(t, ce, NVRTC_ERROR_COMPILATION)
	assert.Contains(t, ce.Error(), `k.cu(3): error: expected a ";"`)
}
