//go:build !gpu

// The driver-not-found checks point the loader at a missing library, which
// sticks for the whole process; under the gpu tag the real library must load,
// so these run only in the GPU-free build.

package cuda_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestWithoutDriver: without libcuda every entry point fails with one
// KindUnsupported error naming it, with the loader's advice as its one Fix
// sentence, and returns nothing.
func TestWithoutDriver(t *testing.T) {
	t.Setenv("VYRECUDA_LIBCUDA", filepath.Join(t.TempDir(), "no-such-libcuda.so.1"))
	if cudaapi.Loaded() == nil {
		t.Skip("libcuda is already loaded in this process; the absent-driver path cannot be exercised")
	}
	calls := []struct {
		op   string
		call func() (bool, error) // reports whether a value came back
	}{
		{"cuda.New", func() (bool, error) { d, err := cuda.New(0); return d != nil, err }},
		{"cuda.New", func() (bool, error) { d, err := cuda.New(-1, cuda.WithLogger(nil)); return d != nil, err }},
		{"cuda.Devices", func() (bool, error) { ds, err := cuda.Devices(); return ds != nil, err }},
		{"cuda.Count", func() (bool, error) { n, err := cuda.Count(); return n != 0, err }},
	}
	for _, c := range calls {
		var got bool
		var err error
		require.NotPanics(t, func() { got, err = c.call() })
		assert.False(t, got, "%s: a failed call returns no value", c.op)
		assert.ErrorIs(t, err, cudaapi.ErrDriverNotFound)
		assert.ErrorIs(t, err, errs.ErrUnsupported)
		var e *errs.Error
		require.True(t, errors.As(err, &e), "want *errs.Error, got %T", err)
		assert.Equal(t, c.op, e.Op)
		assert.Equal(t, 1, strings.Count(err.Error(), "Fix: "), "one Fix sentence, not the loader's and ours: %v", err)
		assert.Contains(t, err.Error(), "VYRECUDA_LIBCUDA", "the loader says how to point at libcuda")
	}
}
