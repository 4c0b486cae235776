package sim

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// requireCode asserts err carries the CUDA result want, found with errors.As
// the way a Backend finds it.
func requireCode(t *testing.T, want cudaapi.Result, err error) {
	t.Helper()
	require.Error(t, err)
	var got cudaapi.Result
	require.True(t, errors.As(err, &got), "error %v carries no cudaapi.Result", err)
	require.Equal(t, want, got, "error: %v", err)
}

func mustAlloc(t *testing.T, d *Device, n uint64) uint64 {
	t.Helper()
	p, err := d.MemAlloc(n)
	require.NoError(t, err)
	return p
}

func mustPinned(t *testing.T, d *Device, n uint64) []byte {
	t.Helper()
	b, err := d.HostAlloc(n)
	require.NoError(t, err)
	return b
}

func mustStream(t *testing.T, d *Device) driver.Stream {
	t.Helper()
	s, err := d.StreamCreate()
	require.NoError(t, err)
	require.NotZero(t, s)
	return s
}

func mustEvent(t *testing.T, d *Device, timing bool) driver.Event {
	t.Helper()
	e, err := d.EventCreate(timing)
	require.NoError(t, err)
	require.NotZero(t, e)
	return e
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func fill(n int, v byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}
