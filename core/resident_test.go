package core_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// requireKind asserts err is a *core.Error of the sentinel's kind whose
// message names every number given, and carries a Fix sentence.
func requireKind(t *testing.T, err, sentinel error, numbers ...any) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel, "got %v", err)
	msg := err.Error()
	assert.Contains(t, msg, "Fix: ")
	for _, n := range numbers {
		assert.Contains(t, msg, fmt.Sprint(n))
	}
}

func TestOpenRejectsBadDrivers(t *testing.T) {
	_, err := core.Open(nil)
	requireKind(t, err, core.ErrInvalidArgument)

	dev := sim.New(sim.Config{TotalMemory: testMemory})
	dev.FailNth(sim.OpInfo, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	_, err = core.Open(dev)
	requireKind(t, err, core.ErrDriver)
	sim.RequireNoLeaks(t, dev)

	dev.NullNth(sim.OpInfo, 1) // a zero DeviceInfo reports 0 bytes of memory
	_, err = core.Open(dev)
	requireKind(t, err, core.ErrDriver, "0 bytes")
	sim.RequireNoLeaks(t, dev)
}

func TestOpenMakesNoDeviceCalls(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	assert.Equal(t, map[sim.Op]uint64{sim.OpInfo: 1}, dev.CallCounts())
	assert.Equal(t, uint64(testMemory), b.DeviceInfo().TotalMemory)
	assert.Equal(t, uint64(testMemory), b.DeviceInfo().TotalMemory)
	free, err := b.LiveFreeMemory()
	require.NoError(t, err)
	assert.Equal(t, uint64(testMemory), free)
}

func TestAllocRejectsBadSizes(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b, dev := openSim(t, sim.Config{})
			h, err := b.Alloc(n)
			requireKind(t, err, core.ErrInvalidArgument, n)
			assert.Equal(t, core.Buffer{}, h)
			assert.Zero(t, b.MemoryStats().Allocated)
			assert.Zero(t, dev.Calls(sim.OpMemAlloc))
			assert.Zero(t, dev.Calls(sim.OpMemGetInfo))
		})
	}
}

// TestResidentBudget carries the reference's budget arithmetic over to the
// Backend: total budget 9/10 of device memory, and new bytes capped by 9/10
// of live free memory while owned bytes always count as within budget.
func TestResidentBudget(t *testing.T) {
	exact := core.WithResidentPoolLimit(0) // exact-size allocations, so free memory is predictable
	t.Run("total budget is 9/10 of device memory", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{TotalMemory: 10_000}, exact)
		_, err := b.Alloc(9_001)
		requireKind(t, err, core.ErrBudget, 9001, "9000-byte budget", "1 still missing")
		assert.Zero(t, dev.Calls(sim.OpMemAlloc), "the budget is checked before the device allocation")
		assert.Zero(t, b.MemoryStats().Allocated)
		h, err := b.Alloc(9_000)
		require.NoError(t, err)
		assert.Equal(t, uint64(9_000), b.MemoryStats().Allocated)
		_, err = b.Alloc(1)
		requireKind(t, err, core.ErrBudget, "9000 bytes reserved of a 9000-byte budget", "1 still missing")
		require.NoError(t, b.Free(h))
		assert.Zero(t, b.MemoryStats().Allocated)
	})
	t.Run("new bytes are capped by live free memory", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{TotalMemory: 10_000}, exact)
		other, err := dev.MemAlloc(9_000) // someone else's memory: 1000 bytes stay free
		require.NoError(t, err)
		defer func() { require.NoError(t, dev.MemFree(other)) }()
		_, err = b.Alloc(901)
		requireKind(t, err, core.ErrBudget, 901, "1000 device bytes free", "1 still missing")
		h, err := b.Alloc(900)
		require.NoError(t, err)
		// Resident 900 and 100 free: the budget keeps the owned 900 and adds 90.
		_, err = b.Alloc(91)
		requireKind(t, err, core.ErrBudget, 91, "100 device bytes free", "1 still missing")
		h2, err := b.Alloc(90)
		require.NoError(t, err)
		assert.Equal(t, uint64(990), b.MemoryStats().Allocated)
		require.NoError(t, b.Free(h))
		require.NoError(t, b.Free(h2))
	})
	t.Run("no live free memory allows no growth", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{TotalMemory: 10_000}, exact)
		h, err := b.Alloc(2_000)
		require.NoError(t, err)
		other, err := dev.MemAlloc(8_000)
		require.NoError(t, err)
		defer func() { require.NoError(t, dev.MemFree(other)) }()
		_, err = b.Alloc(1)
		requireKind(t, err, core.ErrBudget, "0 device bytes free", "2000 bytes reserved", "1 still missing")
		assert.Equal(t, uint64(2_000), b.MemoryStats().Allocated)
		require.NoError(t, b.Free(h))
	})
}

func TestHandlesAreUniqueAcrossBackends(t *testing.T) {
	b1, _ := openSim(t, sim.Config{})
	b2, _ := openSim(t, sim.Config{})
	h1, err := b1.Alloc(64)
	require.NoError(t, err)
	h2, err := b2.Alloc(64)
	require.NoError(t, err)
	assert.NotEqual(t, h1.ID, h2.ID)
	assert.NotZero(t, h1.ID)

	err = b2.Free(h1)
	requireKind(t, err, core.ErrUnknownHandle, h1.ID)
	_, err = b1.ResidentDevicePtr(h1)
	require.NoError(t, err, "a refused foreign free leaves the owner's buffer alone")

	require.NoError(t, b1.Free(h1))
	h3, err := b1.Alloc(64)
	require.NoError(t, err)
	assert.Greater(t, h3.ID, h2.ID, "ids are never reused")
}

func TestHandleIDExhaustionRollsBack(t *testing.T) {
	for _, pooled := range []bool{true, false} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			limit := core.DefaultResidentPoolLimit
			if !pooled {
				limit = 0
			}
			b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(limit))
			saved := core.HandleIDsForTest()
			core.SetHandleIDsForTest(math.MaxUint64)
			_, err := b.Alloc(128)
			core.SetHandleIDsForTest(saved)
			requireKind(t, err, core.ErrBudget, "exhausted")
			assert.Zero(t, b.MemoryStats().Allocated)
			if !pooled {
				assert.Zero(t, dev.Live().Allocations, "the device allocation was freed")
			}
			h, err := b.Alloc(128)
			require.NoError(t, err)
			require.NoError(t, b.Free(h))
		})
	}
}

// badHandles returns handles a Backend must refuse as unknown: the zero
// Buffer, a never-issued id, a freed handle, another Backend's handle and
// a length-drifted copy of a live one (live must be a live handle of b).
func badHandles(t *testing.T, b *core.Backend, live core.Buffer) map[string]core.Buffer {
	t.Helper()
	freed, err := b.Alloc(32)
	require.NoError(t, err)
	require.NoError(t, b.Free(freed))
	other, _ := openSim(t, sim.Config{})
	foreign, err := other.Alloc(live.Len)
	require.NoError(t, err)
	return map[string]core.Buffer{
		"zero":           {},
		"never issued":   {ID: math.MaxUint64 - 7, Len: live.Len},
		"freed":          freed,
		"foreign":        foreign,
		"drifted longer": {ID: live.ID, Len: live.Len + 1},
		"drifted zero":   {ID: live.ID, Len: 0},
	}
}

func TestFreeRefusals(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	live, err := b.Alloc(256)
	require.NoError(t, err)
	for name, h := range badHandles(t, b, live) {
		t.Run(name, func(t *testing.T) {
			before, calls := b.MemoryStats().Allocated, dev.CallCounts()
			err := b.Free(h)
			requireKind(t, err, core.ErrUnknownHandle, h.ID)
			assert.Equal(t, before, b.MemoryStats().Allocated)
			assert.Equal(t, calls, dev.CallCounts())
			_, err = b.ResidentDevicePtr(h)
			requireKind(t, err, core.ErrUnknownHandle, h.ID)
		})
	}
	t.Run("drift names both lengths", func(t *testing.T) {
		err := b.Free(core.Buffer{ID: live.ID, Len: 255})
		requireKind(t, err, core.ErrUnknownHandle, live.ID, 255, 256)
	})
	t.Run("in flight", func(t *testing.T) {
		ptrs, release, err := core.PinForTest(b, []core.Buffer{live, live})
		require.NoError(t, err)
		want, err := b.ResidentDevicePtr(live)
		require.NoError(t, err)
		assert.Equal(t, []uint64{want, want}, ptrs)
		err = b.Free(live)
		requireKind(t, err, core.ErrInFlight, live.ID, "2 unfinished calls")
		release()
		release() // idempotent
		err = b.Close()
		require.NoError(t, err, "released pins leave nothing in flight")
		err = b.Free(live)
		requireKind(t, err, core.ErrClosed)
	})
}

func TestPinIsAllOrNothing(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	_, _, err = core.PinForTest(b, []core.Buffer{h, {ID: h.ID, Len: 63}})
	requireKind(t, err, core.ErrUnknownHandle, "item 1", h.ID)
	require.NoError(t, b.Free(h), "a refused pin marked nothing in flight")
}

func TestFreeDriverFailureKeepsBuffer(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(0))
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err = b.Free(h)
	requireKind(t, err, core.ErrDriver)
	assert.Equal(t, uint64(4096), b.MemoryStats().Allocated)
	_, err = b.ResidentDevicePtr(h)
	require.NoError(t, err, "the buffer stays live after a failed free")
	require.NoError(t, b.Free(h), "and the free can be retried")
	assert.Zero(t, b.MemoryStats().Allocated)
}

func TestAllocDriverFailuresRollBack(t *testing.T) {
	oom := func(d *sim.Device) { d.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }
	unknown := func(d *sim.Device) { d.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_UNKNOWN) }
	cases := []struct {
		name  string
		limit int
		arm   func(d *sim.Device)
		want  error
		inMsg string
	}{
		{"MemGetInfo fails", core.DefaultResidentPoolLimit, func(d *sim.Device) { d.FailNth(sim.OpMemGetInfo, 1, cudaapi.CUDA_ERROR_UNKNOWN) }, core.ErrDriver, "MemGetInfo"},
		// Out of memory with nothing cached to give back is a refusal for
		// lack of room: ErrBudget, carrying the driver's result.
		{"pooled MemAlloc out of memory", core.DefaultResidentPoolLimit, oom, core.ErrBudget, "CUDA_ERROR_OUT_OF_MEMORY"},
		{"pooled MemAlloc fails", core.DefaultResidentPoolLimit, unknown, core.ErrDriver, "MemAlloc"},
		{"pooled MemAlloc null", core.DefaultResidentPoolLimit, func(d *sim.Device) { d.NullNth(sim.OpMemAlloc, 1) }, core.ErrDriver, "null"},
		{"exact MemAlloc out of memory", 0, oom, core.ErrBudget, "0 cached"},
		{"exact MemAlloc fails", 0, unknown, core.ErrDriver, "MemAlloc"},
		{"exact MemAlloc null", 0, func(d *sim.Device) { d.NullNth(sim.OpMemAlloc, 1) }, core.ErrDriver, "null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(c.limit))
			c.arm(dev)
			h, err := b.Alloc(1000)
			requireKind(t, err, c.want, c.inMsg)
			assert.Equal(t, core.Buffer{}, h)
			assert.Zero(t, b.MemoryStats().Allocated)
			assert.Zero(t, b.MemoryStats().Reserved)
			assert.Zero(t, b.Telemetry().ResidentAllocationBytes)
			assert.Zero(t, dev.Live().Allocations)
			h, err = b.Alloc(1000)
			require.NoError(t, err, "the Backend still works")
			require.NoError(t, b.Free(h))
		})
	}
}

func TestResidentAccountingRepair(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	b, _ := openSim(t, sim.Config{}, core.WithLogger(logger))
	h1, err := b.Alloc(100)
	require.NoError(t, err)
	h2, err := b.Alloc(300)
	require.NoError(t, err)
	core.SetResidentBytesForTest(b, 50) // corrupt: releasing 100 would underflow
	require.NoError(t, b.Free(h1))
	assert.Equal(t, uint64(300), b.MemoryStats().Allocated, "rebuilt from the live table")
	assert.Contains(t, logs.String(), "rebuilt")
	assert.Contains(t, logs.String(), "rebuilt=300")
	require.NoError(t, b.Free(h2))
	assert.Zero(t, b.MemoryStats().Allocated)
}

func TestResidentAllocationTelemetryAndPoolReuse(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(3000)
	require.NoError(t, err)
	p1, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	assert.NotZero(t, p1)
	require.NoError(t, b.Free(h))
	allocs := dev.Calls(sim.OpMemAlloc)
	h, err = b.Alloc(2900) // the same 3072-byte size class: a cache hit
	require.NoError(t, err)
	assert.Equal(t, allocs, dev.Calls(sim.OpMemAlloc))
	p2, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	assert.Equal(t, p1, p2)
	assert.Equal(t, uint64(5900), b.Telemetry().ResidentAllocationBytes)
	assert.Equal(t, uint64(2900), b.MemoryStats().Allocated)
	b.ResetTelemetry()
	assert.Equal(t, core.Telemetry{}, b.Telemetry())
	require.NoError(t, b.Free(h))
}

func TestCloseReleasesEverythingAndRefusesAfterwards(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(1024))
	small, err := b.Alloc(100) // pooled
	require.NoError(t, err)
	_, err = b.Alloc(1 << 20) // exact
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: small, Data: make([]byte, 100)}))
	pb, err := b.AllocHostPinned(64)
	require.NoError(t, err)
	assert.False(t, dev.Live().Zero())

	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
	assert.Zero(t, b.MemoryStats().Allocated)
	assert.Nil(t, pb.Bytes(), "Close freed the pinned buffer")

	h := small
	calls := map[string]func() error{
		"Close":             b.Close,
		"Alloc":             func() error { _, err := b.Alloc(1); return err },
		"Free":              func() error { return b.Free(h) },
		"ResidentDevicePtr": func() error { _, err := b.ResidentDevicePtr(h); return err },
		"LiveFreeMemory":    func() error { _, err := b.LiveFreeMemory(); return err },
		"Upload":            func() error { return b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 100)}) },
		"UploadSlice":       func() error { return core.UploadSlice(b, h, make([]byte, 100)) },
		"Download":          func() error { _, err := b.Download(h.All(), nil); return err },
		"DownloadMany":      func() error { _, err := b.DownloadMany(nil, nil); return err },
		"Dispatch":          func() error { return b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{}) },
		"DispatchAsync": func() error {
			_, err := b.DispatchAsync(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{})
			return err
		},
		"AllocHostPinned":    func() error { _, err := b.AllocHostPinned(1); return err },
		"PinnedBuffer.Free":  pb.Free,
		"PinHostBuffer":      func() error { return b.PinHostBuffer(nil, 1) },
		"UnpinHostBuffer":    func() error { return b.UnpinHostBuffer(nil) },
		"UploadAsync":        func() error { return b.UploadAsync(core.UploadAt{Buf: h}) },
		"SynchronizeUploads": b.SynchronizeUploads,
	}
	for name, call := range calls {
		err := call()
		requireKind(t, err, core.ErrClosed)
		assert.True(t, strings.Contains(err.Error(), name), "%s: %v", name, err)
	}
}
