package coretest

import (
	"testing"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/driver"
)

// testMemory checks the device cache through the Driver: a freed buffer is
// served again with no new device allocation, MemoryStats counts what the
// driver was asked, and Trim gives the cached memory back to the device.
func testMemory(t *testing.T, b *core.Backend, drv driver.Driver) {
	const n = 32 << 20
	h, err := b.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	ptr, err := b.ResidentDevicePtr(h)
	if err != nil {
		t.Fatalf("ResidentDevicePtr: %v", err)
	}
	if err := b.Free(h); err != nil {
		t.Fatalf("Free: %v", err)
	}
	before := b.MemoryStats()
	if before.CachedDevice < n || before.Allocated != 0 {
		t.Fatalf("after freeing %d bytes: %+v", n, before)
	}
	h, err = b.Alloc(n - 1000)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n-1000, err)
	}
	st := b.MemoryStats()
	if st.DeviceAllocs != before.DeviceAllocs || st.CacheHits != before.CacheHits+1 || st.FreeMemoryReads != before.FreeMemoryReads {
		t.Fatalf("a buffer of the freed size class was not served from the cache: %+v then %+v", before, st)
	}
	if p, _ := b.ResidentDevicePtr(h); p != ptr {
		t.Fatalf("the cached block %#x was not reused (got %#x)", ptr, p)
	}
	if err := b.Free(h); err != nil {
		t.Fatalf("Free: %v", err)
	}
	free0 := mustFree(t, drv)
	cached := b.MemoryStats().CachedDevice
	if err := b.Trim(); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if d, p := b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned; d != 0 || p != 0 {
		t.Fatalf("after Trim MemoryStats cached = (%d device, %d pinned)", d, p)
	}
	st = b.MemoryStats()
	if st.Reserved != 0 || st.DeviceFrees == 0 || st.ReleasedBytes < cached {
		t.Fatalf("after Trim with nothing live: %+v", st)
	}
	// The driver may keep a little of a freed allocation's pages; most of
	// what was cached must come back.
	if free1 := mustFree(t, drv); free1 < free0+cached/2 {
		t.Fatalf("Trim released %d cached bytes but free device memory went from %d to %d", cached, free0, free1)
	}
}
