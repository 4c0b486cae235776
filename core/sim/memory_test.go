package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestMemAllocAddresses(t *testing.T) {
	d := New(Config{TotalMemory: 1 << 20})
	var prev uint64
	seen := map[uint64]bool{}
	for _, n := range []uint64{1, 255, 256, 257, 4096, 1} {
		p := mustAlloc(t, d, n)
		require.NotZero(t, p)
		require.Zero(t, p%256, "address 0x%x not 256-aligned", p)
		require.Greater(t, p, prev, "addresses must grow")
		require.False(t, seen[p])
		seen[p] = true
		// One past the end belongs to no allocation: a neighbour never
		// starts right after.
		_, err := d.ReadDevice(p+n, 1)
		requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
		b, err := d.ReadDevice(p, int(n))
		require.NoError(t, err)
		require.Equal(t, make([]byte, n), b, "new allocations are zeroed")
		require.NoError(t, d.MemFree(p))
		prev = p
	}
	// Freed addresses are never handed out again.
	p := mustAlloc(t, d, 1)
	require.False(t, seen[p])
	require.NoError(t, d.MemFree(p))
	RequireNoLeaks(t, d)
}

func TestMemAllocAndFreeMisuse(t *testing.T) {
	d := New(Config{TotalMemory: 1000})
	p := mustAlloc(t, d, 600)
	tests := []struct {
		name string
		call func() error
		code cudaapi.Result
	}{
		{"alloc zero", func() error { _, err := d.MemAlloc(0); return err }, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"alloc past free", func() error { _, err := d.MemAlloc(401); return err }, cudaapi.CUDA_ERROR_OUT_OF_MEMORY},
		{"alloc max", func() error { _, err := d.MemAlloc(^uint64(0)); return err }, cudaapi.CUDA_ERROR_OUT_OF_MEMORY},
		{"free zero", func() error { return d.MemFree(0) }, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"free unknown", func() error { return d.MemFree(0x1234) }, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"free interior", func() error { return d.MemFree(p + 256) }, cudaapi.CUDA_ERROR_INVALID_VALUE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := d.Live()
			requireCode(t, tt.code, tt.call())
			require.Equal(t, before, d.Live(), "a refused call changes nothing")
		})
	}
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	require.Equal(t, uint64(400), free)
	require.Equal(t, uint64(1000), total)

	q := mustAlloc(t, d, 400) // exactly the rest fits
	free, _, err = d.MemGetInfo()
	require.NoError(t, err)
	require.Zero(t, free)

	require.NoError(t, d.MemFree(p))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.MemFree(p)) // double free
	require.NoError(t, d.MemFree(q))
	RequireNoLeaks(t, d)
}

func TestReadWriteDevice(t *testing.T) {
	d := New(Config{})
	a := mustAlloc(t, d, 512)
	b := mustAlloc(t, d, 512)
	require.NoError(t, d.WriteDevice(a+10, []byte{1, 2, 3}))
	got, err := d.ReadDevice(a+9, 5)
	require.NoError(t, err)
	require.Equal(t, []byte{0, 1, 2, 3, 0}, got)
	got[0] = 99 // ReadDevice returns a copy
	again, err := d.ReadDevice(a+9, 1)
	require.NoError(t, err)
	require.Equal(t, []byte{0}, again)

	empty, err := d.ReadDevice(a+512, 0)
	require.NoError(t, err, "an empty range at the end of an allocation is valid")
	require.Empty(t, empty)

	bad := []struct {
		name string
		ptr  uint64
		n    int
	}{
		{"negative", a, -1},
		{"zero address", 0, 1},
		{"past end", a + 500, 13},
		{"spans two allocations", a, int(b - a + 1)},
		{"wraps", ^uint64(0) - 1, 4},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.ReadDevice(tt.ptr, tt.n)
			requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
			if tt.n >= 0 && tt.n < 1<<20 {
				requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.WriteDevice(tt.ptr, make([]byte, tt.n)))
			}
		})
	}
	require.NoError(t, d.MemFree(a))
	_, err = d.ReadDevice(a, 1)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
	require.NoError(t, d.MemFree(b))
	RequireNoLeaks(t, d)
}

func TestInfoDefaultsAndConfig(t *testing.T) {
	info, err := New(Config{}).Info()
	require.NoError(t, err)
	require.Equal(t, DefaultName, info.Name)
	require.Equal(t, uint64(DefaultTotalMemory), info.TotalMemory)
	require.Equal(t, 9, info.CCMajor)
	require.Equal(t, 0, info.CCMinor)
	require.NotZero(t, info.FeatureKey)

	info2, err := New(Config{Name: "other", CCMajor: 8, CCMinor: 6, Ordinal: 3, TotalMemory: 5}).Info()
	require.NoError(t, err)
	require.Equal(t, "other", info2.Name)
	require.Equal(t, 3, info2.Ordinal)
	require.Equal(t, uint64(5), info2.TotalMemory)
	require.Equal(t, [2]int{8, 6}, [2]int{info2.CCMajor, info2.CCMinor})
	require.NotEqual(t, info.FeatureKey, info2.FeatureKey, "the feature key depends on the device")

	info3, err := New(Config{FeatureKey: 42}).Info()
	require.NoError(t, err)
	require.Equal(t, uint64(42), info3.FeatureKey)
}

func TestForeignPointersAndHandlesRefused(t *testing.T) {
	a, b := New(Config{}), New(Config{})
	p := mustAlloc(t, a, 64)
	s := mustStream(t, a)
	e := mustEvent(t, a, false)
	m, err := a.ModuleLoad([]byte(testPTX))
	require.NoError(t, err)

	// b has live objects of every kind, so a collision would be possible
	// if handles or addresses were numbered per device.
	bp := mustAlloc(t, b, 64)
	bs := mustStream(t, b)
	be := mustEvent(t, b, false)
	bm, err := b.ModuleLoad([]byte(testPTX))
	require.NoError(t, err)
	require.NotEqual(t, p, bp)

	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, b.MemFree(p))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, b.StreamDestroy(s))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, b.EventDestroy(e))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, b.ModuleUnload(m))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, b.MemsetD8Async(p, 0, 1, bs))

	for _, d := range []struct {
		dev *Device
		p   uint64
		s   driver.Stream
		e   driver.Event
		m   driver.Module
	}{{a, p, s, e, m}, {b, bp, bs, be, bm}} {
		require.NoError(t, d.dev.MemFree(d.p))
		require.NoError(t, d.dev.StreamDestroy(d.s))
		require.NoError(t, d.dev.EventDestroy(d.e))
		require.NoError(t, d.dev.ModuleUnload(d.m))
		RequireNoLeaks(t, d.dev)
	}
}
