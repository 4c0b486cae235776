package core_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// openOpt opens a Backend on a fresh simulated device (leak-checked at
// cleanup by openSim) and a dispatcher over it, closed at cleanup first.
// The Backend sends every allocation straight to the driver, so driver call
// counts show exactly what the dispatcher allocates and frees.
func openOpt(t testing.TB, opts ...core.OptimizerOption) (*core.OptimizerDispatcher, *core.Backend, *sim.Device) {
	t.Helper()
	b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(0))
	d, err := core.NewOptimizerDispatcher(b, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			t.Errorf("dispatcher Close: %v", err)
		}
	})
	return d, b, dev
}

func allocBufs(t *testing.T, d *core.OptimizerDispatcher, lens ...int) []core.Buffer {
	t.Helper()
	bufs := make([]core.Buffer, len(lens))
	for i, n := range lens {
		h, err := d.Alloc(n)
		require.NoError(t, err)
		bufs[i] = h
	}
	return bufs
}

// The reference's pool budget test: with a 64-byte cap the second freed
// 64-byte buffer evicts the first, and Close returns everything.
func TestOptimizerPoolBudgetEvictsAndCloseReleases(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	base := b.MemoryStats().Allocated
	d, err := core.NewOptimizerDispatcher(b, core.WithOptimizerPoolCap(64))
	require.NoError(t, err)

	ids := allocBufs(t, d, 64, 64)
	assert.Equal(t, base+128, b.MemoryStats().Allocated, "two live buffers")
	require.NoError(t, d.Free(ids[0]))
	assert.Equal(t, base+128, b.MemoryStats().Allocated, "one live, one pooled")
	require.NoError(t, d.Free(ids[1]))
	assert.Equal(t, base+64, b.MemoryStats().Allocated, "the pool keeps only its cap")
	assert.Equal(t, core.OptimizerStats{PooledBuffers: 1, PooledBytes: 64, PoolCap: 64,
		StaticCap: b.DeviceInfo().TotalMemory / 32}, d.Stats())

	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
	require.NoError(t, b.Close())
	assert.True(t, dev.Live().Zero(), "live after Backend.Close: %s", dev.Live())
}

func TestOptimizerDefaultCapsAreOneThirtySecondOfMemory(t *testing.T) {
	d, b, _ := openOpt(t)
	s := d.Stats()
	assert.Equal(t, b.DeviceInfo().TotalMemory/32, s.PoolCap)
	assert.Equal(t, b.DeviceInfo().TotalMemory/32, s.StaticCap)
}

// The reference's exactness test, as behaviour: a pool count that does not
// match the free lists is an error, never clamped, and the failed call
// changes nothing.
func TestOptimizerPoolAccountingIsCheckedNotSaturating(t *testing.T) {
	d, b, dev := openOpt(t, core.WithOptimizerPoolCap(4096))
	ids := allocBufs(t, d, 64)
	require.NoError(t, d.Free(ids[0]))
	core.SetOptimizerPooledBytesForTest(d, 10)
	before, bytesBefore, calls := d.Stats(), b.MemoryStats().Allocated, dev.CallCounts()

	_, err := d.Alloc(64)
	require.ErrorIs(t, err, core.ErrBudget)
	assert.Contains(t, err.Error(), "10 - 64")
	assert.Equal(t, before, d.Stats())
	assert.Equal(t, bytesBefore, b.MemoryStats().Allocated)
	assert.Equal(t, calls, dev.CallCounts())

	core.SetOptimizerPooledBytesForTest(d, 64)
	_, err = d.Alloc(64)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), d.Stats().PooledBytes)
}

// A random alloc/free sequence against a model: the pool count equals the
// free lists, stays under the cap, and the Backend holds exactly the live
// plus pooled bytes.
func TestOptimizerPoolAccountingMatchesModel(t *testing.T) {
	const limit = 1000
	d, b, _ := openOpt(t, core.WithOptimizerPoolCap(limit))
	base := b.MemoryStats().Allocated
	r := rand.New(rand.NewSource(7))
	sizes := []int{50, 100, 200, 300, 700, 1200}
	live := map[core.Buffer]int{}
	for step := 0; step < 400; step++ {
		if len(live) == 0 || r.Intn(2) == 0 {
			n := sizes[r.Intn(len(sizes))]
			h, err := d.Alloc(n)
			require.NoError(t, err)
			live[h] = n
		} else {
			for h := range live {
				require.NoError(t, d.Free(h))
				delete(live, h)
				break
			}
		}
		s := d.Stats()
		var liveBytes uint64
		for _, n := range live {
			liveBytes += uint64(n)
		}
		require.Equal(t, core.OptimizerPoolListBytesForTest(d), s.PooledBytes, "step %d", step)
		require.LessOrEqual(t, s.PooledBytes, uint64(limit), "step %d", step)
		require.Equal(t, len(live), s.LiveIDs, "step %d", step)
		require.Equal(t, base+liveBytes+s.PooledBytes, b.MemoryStats().Allocated, "step %d", step)
	}
}

func TestOptimizerReusesExactSizeOnly(t *testing.T) {
	d, b, dev := openOpt(t, core.WithOptimizerPoolCap(4096))
	first := allocBufs(t, d, 64)[0]
	pattern := bytes.Repeat([]byte{0xC3}, 64)
	require.NoError(t, b.Upload(core.UploadAt{Buf: first, Data: pattern}))
	old, err := b.ResidentDevicePtr(first)
	require.NoError(t, err)
	require.NoError(t, d.Free(first))

	allocs, resident := dev.Calls(sim.OpMemAlloc), b.MemoryStats().Allocated
	smaller := allocBufs(t, d, 32)[0]
	assert.Equal(t, allocs+1, dev.Calls(sim.OpMemAlloc), "a 64-byte pooled buffer never serves 32 bytes")
	assert.Equal(t, resident+32, b.MemoryStats().Allocated)
	assert.Equal(t, []int{64}, core.OptimizerPooledLensForTest(d))

	reused := allocBufs(t, d, 64)[0]
	assert.Equal(t, allocs+1, dev.Calls(sim.OpMemAlloc), "the exact size is a pool hit")
	assert.NotEqual(t, first.ID, reused.ID, "a reused buffer gets a fresh handle")
	got, err := b.ResidentDevicePtr(reused)
	require.NoError(t, err)
	assert.Equal(t, old, got, "the pooled buffer itself came back")
	data, err := b.Download(reused.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, pattern, data, "with its bytes")
	assert.Empty(t, core.OptimizerPooledLensForTest(d))

	_, err = b.Download(first.All(), nil)
	require.ErrorIs(t, err, core.ErrUnknownHandle, "the freed handle stays unknown after its buffer is reused")
	require.NoError(t, d.Free(smaller))
	require.NoError(t, d.Free(reused))
}

func TestOptimizerEvictsLargestPooledFirst(t *testing.T) {
	d, b, dev := openOpt(t, core.WithOptimizerPoolCap(1000))
	ids := allocBufs(t, d, 100, 200, 300, 500, 400, 1200)
	for _, id := range ids[:3] {
		require.NoError(t, d.Free(id))
	}
	assert.Equal(t, []int{100, 200, 300}, core.OptimizerPooledLensForTest(d))

	frees := dev.Calls(sim.OpMemFree)
	require.NoError(t, d.Free(ids[3])) // 600+500 > 1000: the 300 goes
	assert.Equal(t, []int{100, 200, 500}, core.OptimizerPooledLensForTest(d))
	require.NoError(t, d.Free(ids[4])) // 800+400 > 1000: the 500 goes
	assert.Equal(t, []int{100, 200, 400}, core.OptimizerPooledLensForTest(d))
	assert.Equal(t, frees+2, dev.Calls(sim.OpMemFree))

	resident := b.MemoryStats().Allocated
	require.NoError(t, d.Free(ids[5])) // alone over the cap: freed at once
	assert.Equal(t, []int{100, 200, 400}, core.OptimizerPooledLensForTest(d))
	assert.Equal(t, resident-1200, b.MemoryStats().Allocated)
	assert.Equal(t, uint64(700), d.Stats().PooledBytes)
}

func TestOptimizerZeroPoolCapFreesEverything(t *testing.T) {
	d, b, _ := openOpt(t, core.WithOptimizerPoolCap(0))
	base := b.MemoryStats().Allocated
	id := allocBufs(t, d, 64)[0]
	require.NoError(t, d.Free(id))
	assert.Equal(t, base, b.MemoryStats().Allocated)
	assert.Zero(t, d.Stats().PooledBuffers)
}

func TestOptimizerRejectsBadSizes(t *testing.T) {
	d, _, dev := openOpt(t)
	for _, n := range []int{0, -1, math.MinInt} {
		calls := dev.CallCounts()
		_, err := d.Alloc(n)
		require.ErrorIs(t, err, core.ErrInvalidArgument)
		assert.Contains(t, err.Error(), strconv.Itoa(n))
		assert.Equal(t, calls, dev.CallCounts())
	}
}

// badBufs returns handles that are not live buffers of d, by name.
func badBufs(t *testing.T, d *core.OptimizerDispatcher, b *core.Backend) map[string]core.Buffer {
	t.Helper()
	freed := allocBufs(t, d, 16)[0]
	require.NoError(t, d.Free(freed))
	pooled := allocBufs(t, d, 16)[0] // the freed buffer again, under a new handle
	t.Cleanup(func() { assert.NoError(t, d.Free(pooled)) })
	other, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	foreign, err := other.Alloc(64)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, other.Close()) })
	direct, err := b.Alloc(64)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Free(direct)) })
	return map[string]core.Buffer{
		"zero":               {},
		"never issued":       {ID: math.MaxUint64 - 3, Len: 64},
		"freed":              freed,
		"other dispatcher's": foreign,
		"backend buffer":     direct,
	}
}

// TestOptimizerRefusesForeignBuffers: the dispatcher's Free takes only its
// own live buffers; a freed handle is unknown to every Backend verb too.
func TestOptimizerRefusesForeignBuffers(t *testing.T) {
	d, b, dev := openOpt(t)
	live := allocBufs(t, d, 64)[0]
	for name, h := range badBufs(t, d, b) {
		t.Run(name, func(t *testing.T) {
			stats, resident, before := d.Stats(), b.MemoryStats().Allocated, dev.CallCounts()
			err := d.Free(h)
			require.ErrorIs(t, err, core.ErrUnknownHandle)
			assert.Contains(t, err.Error(), "handle "+strconv.FormatUint(h.ID, 10)+" ")
			assert.Equal(t, stats, d.Stats())
			assert.Equal(t, resident, b.MemoryStats().Allocated)
			assert.Equal(t, before, dev.CallCounts())
		})
	}
	freed := allocBufs(t, d, 32)[0]
	require.NoError(t, d.Free(freed))
	calls := map[string]func() error{
		"Upload": func() error {
			return b.Upload(core.UploadAt{Buf: live, Data: make([]byte, 64)}, core.UploadAt{Buf: freed})
		},
		"Download": func() error { _, err := b.Download(freed.All(), nil); return err },
		"Run step": func() error {
			_, err := b.Run(core.Batch{Steps: []core.Step{{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{live, live, freed}}}}, nil)
			if err != nil && !strings.Contains(err.Error(), "step 0 buffer 2: ") {
				return fmt.Errorf("message does not name the step and buffer: %w", err)
			}
			return err
		},
	}
	for name, call := range calls {
		before := dev.CallCounts()
		requireKind(t, call(), core.ErrUnknownHandle, freed.ID)
		assert.Equal(t, before, dev.CallCounts(), name)
	}
	require.NoError(t, d.Free(live))
}

func TestOptimizerLengthAndRangeMismatches(t *testing.T) {
	d, b, _ := openOpt(t)
	ids := allocBufs(t, d, 64, 32)
	want := bytes.Repeat([]byte{7}, 64)
	require.NoError(t, b.Upload(core.UploadAt{Buf: ids[0], Data: want}))
	b.ResetTelemetry()
	cases := []struct {
		name  string
		call  func() error
		parts []string
	}{
		{"short whole upload", func() error { return core.UploadSlice(b, ids[0], make([]byte, 63)) },
			[]string{"needs exactly 64 bytes but got 63"}},
		{"long upload", func() error { return b.Upload(core.UploadAt{Buf: ids[0], Data: make([]byte, 65)}) },
			[]string{"65 bytes at offset 0 do not fit its 64 bytes"}},
		{"second of many", func() error {
			return b.Upload(core.UploadAt{Buf: ids[1], Data: make([]byte, 32)}, core.UploadAt{Buf: ids[0], Offset: 60, Data: make([]byte, 10)})
		}, []string{"item 1: handle " + strconv.FormatUint(ids[0].ID, 10), "10 bytes at offset 60"}},
		{"upload past the end", func() error {
			return b.Upload(core.UploadAt{Buf: ids[0], Offset: 60, Data: make([]byte, 8)})
		}, []string{"8 bytes at offset 60", "its 64 bytes"}},
		{"negative upload offset", func() error {
			return b.Upload(core.UploadAt{Buf: ids[0], Offset: -1, Data: make([]byte, 1)})
		}, []string{"offset -1"}},
		{"read past the end", func() error {
			_, err := b.DownloadMany([]core.Range{{Buf: ids[1], Offset: 30, Len: 3}}, nil)
			return err
		}, []string{"3 bytes at offset 30", "its 32 bytes"}},
		{"run read past the end", func() error {
			_, err := b.Run(core.Batch{Clears: []core.Buffer{ids[0]}, Reads: []core.Range{{Buf: ids[1], Len: 33}}}, nil)
			return err
		}, []string{"read 0: handle " + strconv.FormatUint(ids[1].ID, 10), "33 bytes at offset 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			for _, p := range c.parts {
				assert.Contains(t, err.Error(), p)
			}
			assert.Contains(t, err.Error(), "Fix: ")
		})
	}
	assert.Equal(t, core.Telemetry{}, b.Telemetry(), "no byte moved")
	got, err := b.Download(ids[0].All(), nil)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the run with a bad read did not clear")
}

func TestOptimizerBuffersMoveBytesWithOneFence(t *testing.T) {
	d, b, _ := openOpt(t)
	r := rand.New(rand.NewSource(3))
	ids := allocBufs(t, d, 100, 4096, 7)
	want := [][]byte{randomBytes(r, 100), randomBytes(r, 4096), randomBytes(r, 7)}
	b.ResetTelemetry()
	require.NoError(t, b.Upload(core.UploadAt{Buf: ids[0], Data: want[0]}, core.UploadAt{Buf: ids[1], Data: want[1]}, core.UploadAt{Buf: ids[2], Data: want[2]}))
	assert.Equal(t, uint64(1), b.Telemetry().SyncPoints, "one fence for the batch")
	patch := []byte{1, 2, 3}
	require.NoError(t, b.Upload(core.UploadAt{Buf: ids[1], Offset: 10, Data: patch}))
	copy(want[1][10:], patch)

	got, err := b.DownloadMany(allOf(ids), nil)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	dst := [][]byte{make([]byte, 0, 16)}
	out, err := b.DownloadMany([]core.Range{{Buf: ids[1], Offset: 8, Len: 6}, {Buf: ids[2], Offset: 2, Len: 5}}, dst)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{want[1][8:14], want[2][2:7]}, out)
}

// The reference's memset test: clears and fills move no host-to-device
// bytes and go to the device as memsets.
func TestOptimizerClearAndFillUseMemset(t *testing.T) {
	d, b, dev := openOpt(t, core.WithOptimizerPoolCap(4096))
	id := allocBufs(t, d, 64)[0]
	require.NoError(t, b.Upload(core.UploadAt{Buf: id, Data: bytes.Repeat([]byte{0xFF}, 64)}))

	b.ResetTelemetry()
	memsets, copies := dev.Calls(sim.OpMemsetD8Async), dev.Calls(sim.OpMemcpyHtoDAsync)
	out, err := b.Run(core.Batch{Clears: []core.Buffer{id}, Reads: []core.Range{{Buf: id, Len: 64}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{make([]byte, 64)}, out)
	tel := b.Telemetry()
	assert.Zero(t, tel.HostToDeviceBytes)
	assert.Equal(t, uint64(1), tel.MemsetOps)
	assert.Equal(t, uint64(1), tel.SyncPoints)
	assert.Equal(t, memsets+1, dev.Calls(sim.OpMemsetD8Async))
	assert.Equal(t, copies, dev.Calls(sim.OpMemcpyHtoDAsync), "no host-to-device copy queued")

	b.ResetTelemetry()
	out, err = b.Run(core.Batch{Fills: []core.Fill{{Buf: id, Value: 0xA5}}, Reads: []core.Range{{Buf: id, Len: 64}}}, out)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{bytes.Repeat([]byte{0xA5}, 64)}, out)
	assert.Zero(t, b.Telemetry().HostToDeviceBytes)
	assert.Equal(t, memsets+2, dev.Calls(sim.OpMemsetD8Async))
	require.NoError(t, d.Free(id))
}

func TestOptimizerRunSequenceWithOneFence(t *testing.T) {
	d, b, _ := openOpt(t)
	const n = 256
	ids := allocBufs(t, d, 4*n, 4*n, 4*n)
	a, c := make([]byte, 4*n), make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(a[4*i:], uint32(i))
		binary.LittleEndian.PutUint32(c[4*i:], uint32(2*i))
	}
	want := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(want[4*i:], uint32(5*i)) // (a+c)+c, as u32
	}
	b.ResetTelemetry()
	vadd := core.ProgramVAddU32()
	out, err := b.Run(core.Batch{
		Clears:  []core.Buffer{ids[2]},
		Uploads: []core.UploadAt{{Buf: ids[0], Data: a}, {Buf: ids[1], Data: c}},
		Steps: []core.Step{
			{Program: vadd, Bufs: []core.Buffer{ids[0], ids[1], ids[2]}},
			{Program: vadd, Bufs: []core.Buffer{ids[2], ids[1], ids[2]}},
		},
		Reads: []core.Range{{Buf: ids[2], Len: 4 * n}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{want}, out)
	tel := b.Telemetry()
	assert.Equal(t, uint64(1), tel.SyncPoints)
	assert.Equal(t, uint64(2), tel.KernelLaunches)
	assert.Equal(t, uint64(8*n), tel.HostToDeviceBytes)
}

func TestOptimizerRefusesBusyAndInFlightBuffers(t *testing.T) {
	d, b, _ := openOpt(t)
	id := allocBufs(t, d, 64)[0]
	_, release, err := core.PinForTest(b, []core.Buffer{id})
	require.NoError(t, err)
	stats := d.Stats()

	err = d.Free(id)
	require.ErrorIs(t, err, core.ErrInFlight)
	assert.Contains(t, err.Error(), fmt.Sprintf("handle %d", id.ID))
	require.ErrorIs(t, d.Close(), core.ErrInFlight)
	assert.Equal(t, stats, d.Stats(), "refusals change nothing")
	_, err = b.Download(id.All(), nil)
	require.NoError(t, err, "a refused Close left the dispatcher open")

	release()
	require.NoError(t, d.Free(id))
}
