package hostmem

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// addr returns the address of b[i].
func addr(b []byte, i int) uintptr { return uintptr(unsafe.Pointer(&b[i])) }

func TestRegistryRefusesOverlapsAndFindsContainingRegions(t *testing.T) {
	h := newHost()
	var r Registry
	mem := make([]byte, 4096)
	require.NoError(t, r.Register(unsafe.Pointer(&mem[1024]), 1024, h.HostRegister))
	for _, c := range []struct{ off, n int }{{0, 1025}, {2047, 1}, {1024, 1024}, {1500, 2000}} {
		err := r.Register(unsafe.Pointer(&mem[c.off]), c.n, h.HostRegister)
		assert.ErrorIs(t, err, ErrOverlap, "[%d, +%d)", c.off, c.n)
	}
	assert.Equal(t, uint64(1), h.Count(opHostRegister), "an overlap reached the driver")
	require.NoError(t, r.Register(unsafe.Pointer(&mem[0]), 1024, h.HostRegister), "adjacent below")
	require.NoError(t, r.Register(unsafe.Pointer(&mem[2048]), 2048, h.HostRegister), "adjacent above")
	n, bytes := r.Left()
	assert.Equal(t, 3, n)
	assert.Equal(t, uint64(4096), bytes)

	reg := r.Use(addr(mem, 1100), 100)
	require.NotNil(t, reg)
	assert.Equal(t, addr(mem, 1024), reg.Start())
	assert.Equal(t, 1024, reg.Len())
	assert.Nil(t, r.Use(addr(mem, 2000), 100), "a range across two regions is inside none")
	assert.Nil(t, r.Use(addr(mem, 100), 0), "an empty range")
	r.Done(reg)
	require.NoError(t, r.ReleaseAll("Close", h))
	requireNoLive(t, h)
	n, _ = r.Left()
	assert.Zero(t, n)
}

func TestRegistryFreeRefusesRegionsInUseAndTwice(t *testing.T) {
	h := newHost()
	var r Registry
	buf, err := h.HostAlloc(256)
	require.NoError(t, err)
	reg, err := r.AddAlloc(buf)
	require.NoError(t, err)
	_, err = r.AddAlloc(buf[16:32])
	assert.ErrorIs(t, err, ErrOverlap, "a buffer inside a registered one")
	assert.Equal(t, &buf[0], &r.Bytes(reg)[0])

	use := r.Use(addr(buf, 10), 20)
	require.Same(t, reg, use)
	settled := 0
	err = r.Free(reg, func() { settled++ }, h.HostFree)
	var busy *InUseError
	require.ErrorAs(t, err, &busy)
	assert.Equal(t, 1, busy.Pending)
	assert.Equal(t, 1, settled, "settle runs before a region in use is refused")
	assert.Zero(t, h.Count(opHostFree))

	// settle may end the use itself (the quarantine's release does).
	err = r.Free(reg, func() { r.Done(use) }, h.HostFree)
	require.NoError(t, err)
	assert.Nil(t, r.Bytes(reg), "a freed region has no bytes")
	assert.ErrorIs(t, r.Free(reg, nil, h.HostFree), ErrGone)
	assert.Equal(t, uint64(1), h.Count(opHostFree))
	requireNoLive(t, h)
}

func TestRegistryFreeFailureKeepsTheRegion(t *testing.T) {
	h := newHost()
	var r Registry
	buf, err := h.HostAlloc(64)
	require.NoError(t, err)
	reg, err := r.AddAlloc(buf)
	require.NoError(t, err)
	h.FailNth(opHostFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	err = r.Free(reg, nil, h.HostFree)
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_INVALID_VALUE)
	assert.NotNil(t, r.Bytes(reg))
	require.NoError(t, r.Free(reg, nil, h.HostFree))
	requireNoLive(t, h)
}

func TestRegistryUnregisterTakesOnlyCallerRangeStarts(t *testing.T) {
	h := newHost()
	var r Registry
	mem := make([]byte, 512)
	buf, err := h.HostAlloc(64)
	require.NoError(t, err)
	_, err = r.AddAlloc(buf)
	require.NoError(t, err)
	require.NoError(t, r.Register(unsafe.Pointer(&mem[0]), 512, h.HostRegister))
	for name, p := range map[string]unsafe.Pointer{"nil": nil, "inside": unsafe.Pointer(&mem[8]),
		"a HostAlloc buffer": unsafe.Pointer(&buf[0])} {
		assert.ErrorIs(t, r.Unregister(p, nil, h.HostUnregister), ErrNotRegistered, name)
	}
	use := r.Use(addr(mem, 8), 8)
	var busy *InUseError
	require.ErrorAs(t, r.Unregister(unsafe.Pointer(&mem[0]), nil, h.HostUnregister), &busy)
	r.Done(use)
	h.FailNth(opHostUnregister, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	assert.ErrorIs(t, r.Unregister(unsafe.Pointer(&mem[0]), nil, h.HostUnregister), cudaapi.CUDA_ERROR_UNKNOWN)
	require.NoError(t, r.Unregister(unsafe.Pointer(&mem[0]), nil, h.HostUnregister))
	n, bytes := r.Left()
	assert.Equal(t, 1, n)
	assert.Equal(t, uint64(64), bytes)
	require.NoError(t, r.ReleaseAll("Close", h))
	requireNoLive(t, h)
}

func TestRegistryRegisterFailureRegistersNothing(t *testing.T) {
	h := newHost()
	var r Registry
	mem := make([]byte, 64)
	h.FailNth(opHostRegister, 1, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
	err := r.Register(unsafe.Pointer(&mem[0]), 64, h.HostRegister)
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
	n, _ := r.Left()
	assert.Zero(t, n)
}

// TestRegistryReleaseAllKeepsFailuresAndForgetsRegionsInUse: a region the
// driver fails to release stays for a retry, with the first failure
// returned under the caller's operation; a region a copy still uses is
// forgotten, left pinned.
func TestRegistryReleaseAllKeepsFailuresAndForgetsRegionsInUse(t *testing.T) {
	h := newHost()
	var r Registry
	a, err := h.HostAlloc(64)
	require.NoError(t, err)
	ra, err := r.AddAlloc(a)
	require.NoError(t, err)
	mem := make([]byte, 128)
	require.NoError(t, r.Register(unsafe.Pointer(&mem[0]), 128, h.HostRegister))
	stuck := make([]byte, 32)
	require.NoError(t, r.Register(unsafe.Pointer(&stuck[0]), 32, h.HostRegister))
	require.NotNil(t, r.Use(addr(stuck, 0), 32))

	h.FailNth(opHostFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err = r.ReleaseAll("Close", h)
	requireErrKind(t, err, errs.ErrDriver, "Close", "HostFree")
	n, bytes := r.Left()
	assert.Equal(t, 1, n, "only the region whose free failed is kept")
	assert.Equal(t, uint64(64), bytes)
	assert.NotNil(t, r.Bytes(ra))
	require.NoError(t, r.ReleaseAll("Close", h))
	assert.Nil(t, r.Bytes(ra))
	h.mu.Lock()
	assert.Len(t, h.regs, 1, "the range in use stays pinned")
	h.regs = map[uintptr]uint64{}
	h.mu.Unlock()
	requireNoLive(t, h)
}
