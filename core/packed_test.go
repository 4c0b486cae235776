package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// noPacking keeps every batch on the per-copy path, for comparisons.
var noPacking = core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1, PipelineMinBytes: -1})

// packedSet allocates count buffers with the given lengths (cycled) and
// fills each with random bytes written straight into device memory.
func packedSet(t *testing.T, b *core.Backend, dev *sim.Device, r *rand.Rand, count int, lens ...int) ([]core.Buffer, [][]byte) {
	t.Helper()
	bufs := make([]core.Buffer, count)
	want := make([][]byte, count)
	for i := range bufs {
		h, err := b.Alloc(lens[i%len(lens)])
		require.NoError(t, err)
		bufs[i] = h
		want[i] = randomBytes(r, h.Len)
		ptr, err := b.ResidentDevicePtr(h)
		require.NoError(t, err)
		require.NoError(t, dev.WriteDevice(ptr, want[i]))
	}
	return bufs, want
}

// simBytes reads h's bytes straight from simulated device memory.
func simBytes(t *testing.T, b *core.Backend, dev *sim.Device, h core.Buffer) []byte {
	t.Helper()
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	got, err := dev.ReadDevice(ptr, h.Len)
	require.NoError(t, err)
	return got
}

// onePart keeps packed uploads in one DMA, whatever their size.
var onePart = core.WithTransferTuning(core.TransferTuning{PackParts: 1})

func TestPackedUploadMovesBytesWithOneDMAAndOneLaunch(t *testing.T) {
	tests := []struct {
		name string
		lens []int
		dmas uint64
	}{
		{"aligned 4 KiB", []int{4096}, 1},
		{"odd lengths", []int{1, 7, 100, 4095, 33}, 1},
		{"mixed", []int{16, 4096, 3, 65536, 250}, 1},
		{"large", []int{65536, 4095}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, dev := openSim(t, sim.Config{}, onePart)
			r := rand.New(rand.NewSource(7))
			const n = 64
			bufs, _ := packedSet(t, b, dev, r, n, tt.lens...)
			ups := make([]core.UploadAt, 0, n+8)
			want := make([][]byte, n)
			for i, h := range bufs {
				ups = append(ups, core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)})
				want[i] = bytes.Clone(ups[i].Data)
			}
			// Overlapping pieces at odd offsets: later ones win, fused first.
			for i := 0; i < 8; i++ {
				h := bufs[i*5]
				off := h.Len / 3
				data := randomBytes(r, (h.Len-off+1)/2)
				ups = append(ups, core.UploadAt{Buf: h, Offset: off, Data: data})
				copy(want[i*5][off:], data)
			}
			b.ResetTelemetry()
			calls := dev.CallCounts()
			require.NoError(t, b.Upload(ups...))
			for i, h := range bufs {
				require.Equal(t, want[i], simBytes(t, b, dev, h), "buffer %d", i)
			}
			payload := uint64(0)
			for _, h := range bufs {
				payload += uint64(h.Len)
			}
			assert.Equal(t, core.Telemetry{HostToDeviceBytes: payload, UploadOps: 1, SyncPoints: 1,
				RequestedCopies: uint64(len(ups)), DeviceCopies: tt.dmas, PackedLaunches: 1}, b.Telemetry())
			after := dev.CallCounts()
			assert.Equal(t, calls[sim.OpMemcpyHtoDAsync]+tt.dmas, after[sim.OpMemcpyHtoDAsync])
			assert.Equal(t, calls[sim.OpLaunch]+1, after[sim.OpLaunch])
			assert.Equal(t, calls[sim.OpStreamSynchronize]+1, after[sim.OpStreamSynchronize])
		})
	}
}

func TestPackedReadbackMatchesPerCopyPath(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	lens := []int{4096, 1, 17, 300, 8192, 64}
	packed, pdev := openSim(t, sim.Config{})
	plain, _ := openSim(t, sim.Config{}, noPacking)
	pbufs, want := packedSet(t, packed, pdev, r, 48, lens...)
	qbufs := make([]core.Buffer, len(pbufs))
	for i, h := range pbufs {
		q, err := plain.Alloc(h.Len)
		require.NoError(t, err)
		require.NoError(t, plain.Upload(core.UploadAt{Buf: q, Data: want[i]}))
		qbufs[i] = q
	}
	// Ranges with overlaps, touching pieces and empty ones.
	var pr, qr []core.Range
	for i := range pbufs {
		n := pbufs[i].Len
		for _, rg := range [][2]int{{0, n}, {n / 4, n / 2}, {n / 2, n - n/2}, {n, 0}} {
			pr = append(pr, core.Range{Buf: pbufs[i], Offset: rg[0], Len: rg[1]})
			qr = append(qr, core.Range{Buf: qbufs[i], Offset: rg[0], Len: rg[1]})
		}
	}
	packed.ResetTelemetry()
	plain.ResetTelemetry()
	got, err := packed.DownloadMany(pr, nil)
	require.NoError(t, err)
	ref, err := plain.DownloadMany(qr, nil)
	require.NoError(t, err)
	require.Len(t, got, len(ref))
	for i := range got {
		require.Equal(t, nonNil(ref[i]), nonNil(got[i]), "range %d", i)
		rg := pr[i]
		idx := i / 4
		require.Equal(t, want[idx][rg.Offset:rg.Offset+rg.Len], nonNil(got[i]), "range %d", i)
	}
	pt, qt := packed.Telemetry(), plain.Telemetry()
	assert.Equal(t, qt.DeviceToHostBytes, pt.DeviceToHostBytes, "the payload is the same")
	assert.Equal(t, qt.RequestedCopies, pt.RequestedCopies)
	assert.Equal(t, uint64(len(pbufs)), qt.DeviceCopies, "each buffer's ranges fuse into one copy")
	assert.Equal(t, uint64(1), pt.DeviceCopies, "the packed data down; the gather reads the table from pinned memory")
	assert.Equal(t, uint64(1), pt.PackedLaunches)
	assert.Equal(t, uint64(1), pt.SyncPoints)

	many, err := packed.DownloadMany(allOf(pbufs), nil)
	require.NoError(t, err)
	into, err := packed.DownloadMany(allOf(pbufs), make([][]byte, 3, 100))
	require.NoError(t, err)
	for i := range pbufs {
		require.Equal(t, want[i], many[i])
		require.Equal(t, want[i], into[i])
	}
}

func TestPackedPathsReuseModuleAndStaging(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	r := rand.New(rand.NewSource(5))
	bufs, want := packedSet(t, b, dev, r, core.PackMinCopiesForTest, 4096)
	ups := make([]core.UploadAt, len(bufs))
	for i, h := range bufs {
		ups[i] = core.UploadAt{Buf: h, Data: want[i]}
	}
	require.NoError(t, b.Upload(ups...))
	_, err := b.DownloadMany(allOf(bufs), nil)
	require.NoError(t, err)
	calls := dev.CallCounts()
	for range 3 {
		require.NoError(t, b.Upload(ups...))
		got, err := b.DownloadMany(allOf(bufs), nil)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	after := dev.CallCounts()
	for _, op := range []sim.Op{sim.OpModuleLoad, sim.OpModuleFunction, sim.OpMemAlloc, sim.OpHostAlloc, sim.OpStreamCreate, sim.OpEventCreate} {
		assert.Equal(t, calls[op], after[op], "%v: warm packed transfers allocate nothing", op)
	}
	assert.Equal(t, 1, dev.Live().Modules, "scatter and gather share one module")
}

func TestPackedBelowThresholdUsesPerCopyPath(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	r := rand.New(rand.NewSource(2))
	n := core.PackMinCopiesForTest - 1
	bufs, want := packedSet(t, b, dev, r, n, 64)
	ups := make([]core.UploadAt, n)
	for i, h := range bufs {
		ups[i] = core.UploadAt{Buf: h, Data: want[i]}
	}
	h2d := dev.Calls(sim.OpMemcpyHtoDAsync)
	require.NoError(t, b.Upload(ups...))
	assert.Equal(t, h2d+uint64(n), dev.Calls(sim.OpMemcpyHtoDAsync))
	assert.Zero(t, dev.Calls(sim.OpLaunch))
	assert.Zero(t, dev.Live().Modules)
}

// packedFault arms one fault; nth counts from arming.
type packedFault struct {
	name string
	arm  func(d *sim.Device)
	want string // the failing call named in the error
}

func packedFaults() []packedFault {
	bad := cudaapi.CUDA_ERROR_UNKNOWN
	return []packedFault{
		{"module load fails", func(d *sim.Device) { d.FailNth(sim.OpModuleLoad, 1, bad) }, "ModuleLoad"},
		{"module load null", func(d *sim.Device) { d.NullNth(sim.OpModuleLoad, 1) }, "ModuleLoad"},
		{"function lookup fails", func(d *sim.Device) { d.FailNth(sim.OpModuleFunction, 1, bad) }, "ModuleFunction"},
		{"twin binding fails", func(d *sim.Device) { d.FailNth(sim.OpBindHostKernel, 1, bad) }, "BindHostKernel"},
		{"pinned staging fails", func(d *sim.Device) { d.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, "HostAlloc"},
		{"pinned staging null", func(d *sim.Device) { d.NullNth(sim.OpHostAlloc, 1) }, "HostAlloc"},
		// Out of memory there falls back to the per-copy path (TestPackedTransfersFallBackWhenDeviceStagingDoesNotFit).
		{"device staging fails", func(d *sim.Device) { d.FailNth(sim.OpMemAlloc, 1, bad) }, "MemAlloc"},
		{"device staging null", func(d *sim.Device) { d.NullNth(sim.OpMemAlloc, 1) }, "MemAlloc"},
		{"stream create fails", func(d *sim.Device) { d.FailNth(sim.OpStreamCreate, 1, bad) }, "StreamCreate"},
		{"copy up fails", func(d *sim.Device) { d.FailNth(sim.OpMemcpyHtoDAsync, 1, bad) }, "MemcpyHtoDAsync"},
		{"launch fails", func(d *sim.Device) { d.FailNth(sim.OpLaunch, 1, bad) }, "Launch"},
		{"sync fails", func(d *sim.Device) { d.FailNth(sim.OpStreamSynchronize, 1, bad) }, "StreamSynchronize"},
	}
}

// packedInParts splits packed uploads of 1 MiB or more into 4 DMAs.
var packedInParts = core.WithTransferTuning(core.TransferTuning{PackParts: 4})

func TestPackedUploadInParts(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, packedInParts)
	r := rand.New(rand.NewSource(8))
	bufs, _ := packedSet(t, b, dev, r, 64, 65536, 4095)
	ups := make([]core.UploadAt, len(bufs))
	for i, h := range bufs {
		ups[i] = core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)}
	}
	b.ResetTelemetry()
	require.NoError(t, b.Upload(ups...))
	for i, h := range bufs {
		require.Equal(t, ups[i].Data, simBytes(t, b, dev, h), "buffer %d", i)
	}
	tel := b.Telemetry()
	assert.Equal(t, uint64(4), tel.DeviceCopies, "the data in four parts, the table with the last")
	assert.Equal(t, uint64(1), tel.SyncPoints)
	assert.Equal(t, uint64(1), tel.PackedLaunches)
}

func TestPackedUploadFailuresLeakNothing(t *testing.T) {
	for _, size := range []int{4096, 65536} { // one DMA; the data in parts, the table with the last
		faults := packedFaults()
		if size == 65536 {
			faults = append(faults, packedFault{"last part and table copy up fails",
				func(d *sim.Device) { d.FailNth(sim.OpMemcpyHtoDAsync, 4, cudaapi.CUDA_ERROR_UNKNOWN) }, "MemcpyHtoDAsync"})
		}
		for _, f := range faults {
			t.Run(fmt.Sprintf("%s/%d", f.name, size), func(t *testing.T) { packedUploadFault(t, f, size) })
		}
	}
}

func packedUploadFault(t *testing.T, f packedFault, size int) {
	b, dev := openSim(t, sim.Config{}, packedInParts)
	r := rand.New(rand.NewSource(3))
	n := core.PackMinCopiesForTest
	bufs, old := packedSet(t, b, dev, r, n, size)
	ups := make([]core.UploadAt, n)
	for i, h := range bufs {
		ups[i] = core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)}
	}
	b.ResetTelemetry()
	f.arm(dev)
	err := b.Upload(ups...)
	require.Error(t, err)
	assert.ErrorIs(t, err, core.ErrDriver)
	assert.Contains(t, err.Error(), f.want)
	assert.Equal(t, 0, b.LaunchResourceCounts().Leases)
	if f.want != "StreamSynchronize" && f.want != "Launch" {
		// Nothing reached the destinations (a failed sync drains the
		// queued scatter, which then runs).
		for i, h := range bufs {
			require.Equal(t, old[i], simBytes(t, b, dev, h), "buffer %d", i)
		}
	}
	assert.Zero(t, b.Telemetry().UploadOps, "a failed upload is not counted")
	// The Backend stays usable and the same batch then succeeds.
	require.NoError(t, b.Upload(ups...))
	for i, h := range bufs {
		require.Equal(t, ups[i].Data, simBytes(t, b, dev, h), "buffer %d", i)
	}
	for _, h := range bufs {
		require.NoError(t, b.Free(h), "nothing is left in flight")
	}
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}

func TestPackedReadbackFailuresLeaveOutputsUnchanged(t *testing.T) {
	faults := append(packedFaults(),
		packedFault{"copy down fails", func(d *sim.Device) { d.FailNth(sim.OpMemcpyDtoHAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN) }, "MemcpyDtoHAsync"})
	for _, mode := range tableModes {
		for _, f := range faults {
			if mode.opt == nil && f.want == "MemcpyHtoDAsync" {
				continue // the gather reads its table where the host wrote it: no copy up
			}
			t.Run(mode.name+"/"+f.name, func(t *testing.T) { packedReadbackFailure(t, f, mode.opt) })
		}
	}
}

// tableModes are the two ways a packed readback's table reaches the
// gather: read from pinned host memory (the simulated device maps it, as
// GPUs with unified addressing do), or copied up by a DMA of its own.
var tableModes = []struct {
	name string
	opt  core.Option
}{{"mapped-table", nil}, {"table-dma", core.WithTableDMA()}}

// packedReadbackFailure is one case of
// TestPackedReadbackFailuresLeaveOutputsUnchanged.
func packedReadbackFailure(t *testing.T, f packedFault, opt core.Option) {
	b, dev := openSim(t, sim.Config{}, opt)
	r := rand.New(rand.NewSource(4))
	n := core.PackMinCopiesForTest
	bufs, want := packedSet(t, b, dev, r, n, 4096, 100)
	dst := make([][]byte, n)
	for i := range dst {
		dst[i] = bytes.Repeat([]byte{0xAB}, 4096)
	}
	snapshot := make([][]byte, n)
	for i := range dst {
		snapshot[i] = bytes.Clone(dst[i])
	}
	f.arm(dev)
	out, err := b.DownloadMany(allOf(bufs), dst)
	require.Error(t, err)
	assert.ErrorIs(t, err, core.ErrDriver)
	assert.Contains(t, err.Error(), f.want)
	require.Len(t, out, n)
	for i := range dst {
		assert.Equal(t, snapshot[i], dst[i], "slot %d is unchanged", i)
		assert.Len(t, out[i], 4096, "slot %d keeps its length", i)
	}
	assert.Equal(t, 0, b.LaunchResourceCounts().Leases)
	assert.Zero(t, b.Telemetry().ReadbackOps)
	got, err := b.DownloadMany(allOf(bufs), dst)
	require.NoError(t, err)
	for i := range got {
		require.Equal(t, want[i], got[i], fmt.Sprint(i))
	}
	for _, h := range bufs {
		require.NoError(t, b.Free(h))
	}
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}

// TestPackedTransfersFallBackWhenDeviceStagingDoesNotFit: on a device too
// full for the packed path's device staging (a power-of-two bucket outside
// the resident budget), uploads and readbacks that would be packed take the
// per-copy path instead of failing with out of memory, and leave nothing
// behind.
func TestPackedTransfersFallBackWhenDeviceStagingDoesNotFit(t *testing.T) {
	n := core.PackMinCopiesForTest
	const size = 4096
	// The buffers take n*size bytes; the packed staging would need a
	// 2*n*size bucket (data plus table), more than what is left.
	b, dev := openSim(t, sim.Config{TotalMemory: uint64(n*size + n*size/2)})
	r := rand.New(rand.NewSource(9))
	bufs, old := packedSet(t, b, dev, r, n, size)
	_, err := dev.MemAlloc(uint64(2 * n * size))
	require.Error(t, err, "the packed staging does not fit")

	t.Run("readback", func(t *testing.T) {
		b.ResetTelemetry()
		got, err := b.DownloadMany(allOf(bufs), nil)
		require.NoError(t, err)
		assert.Equal(t, old, got)
		tel := b.Telemetry()
		assert.Zero(t, tel.PackedLaunches)
		assert.Equal(t, uint64(n), tel.DeviceCopies, "one copy per buffer")
		assert.Equal(t, uint64(1), tel.SyncPoints)
	})
	t.Run("upload", func(t *testing.T) {
		ups := make([]core.UploadAt, n)
		for i, h := range bufs {
			ups[i] = core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)}
		}
		b.ResetTelemetry()
		require.NoError(t, b.Upload(ups...))
		for i, h := range bufs {
			require.Equal(t, ups[i].Data, simBytes(t, b, dev, h), "buffer %d", i)
		}
		tel := b.Telemetry()
		assert.Zero(t, tel.PackedLaunches)
		assert.Equal(t, uint64(n), tel.DeviceCopies, "one copy per buffer")
		assert.Equal(t, uint64(1), tel.SyncPoints)
	})
	dc := b.MemoryStats().CachedDevice
	assert.Zero(t, dc, "no device staging was taken")
	assert.Zero(t, b.LaunchResourceCounts().Leases)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}
