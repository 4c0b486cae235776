package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// staleReader is a program whose Go twin reads n bytes at a device address
// it kept from earlier, the way a kernel given a dangling pointer would.
func staleReader(t *testing.T, ptr uint64, n int) *core.Program {
	t.Helper()
	p, err := core.NewProgram(core.ProgramSpec{Name: "stale", Image: kernels.FillPTX, Entry: kernels.FillEntry,
		Grid: core.GridRule{Blocks: 1}, Buffers: 1,
		Host: func(mem core.KernelMemory, _ core.LaunchConfig, _ []core.KernelArg) error {
			_, err := mem.Bytes(ptr, n)
			return err
		}})
	require.NoError(t, err)
	return p
}

// With PoisonCache, a kernel reading a freed 4 KiB buffer that the device
// pool kept fails instead of succeeding silently; without it, it succeeds.
func TestPoisonCacheCatchesKernelUseAfterFree(t *testing.T) {
	for _, poison := range []bool{false, true} {
		b, dev := openSim(t, sim.Config{PoisonCache: poison})
		live, err := b.Alloc(16)
		require.NoError(t, err)
		h, err := b.Alloc(4 << 10)
		require.NoError(t, err)
		ptr, err := b.ResidentDevicePtr(h)
		require.NoError(t, err)
		require.NoError(t, b.Free(h))
		dc := b.MemoryStats().CachedDevice
		require.Equal(t, uint64(4<<10), dc, "the pool kept the memory")
		assert.Equal(t, poison, dev.Poisoned(ptr))

		err = b.Dispatch(staleReader(t, ptr, 4<<10), []core.Buffer{live}, core.DispatchConfig{})
		if !poison {
			require.NoError(t, err, "without poisoning the stale read goes unnoticed")
		} else {
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Contains(t, err.Error(), "use after free")
		}

		// Reallocating takes the memory out of the cache: usable again, and
		// with poisoning its unwritten bytes show the poison pattern.
		h2, err := b.Alloc(4 << 10)
		require.NoError(t, err)
		ptr2, err := b.ResidentDevicePtr(h2)
		require.NoError(t, err)
		require.Equal(t, ptr, ptr2, "a pool hit")
		assert.False(t, dev.Poisoned(ptr2))
		got, err := b.Download(h2.All(), nil)
		require.NoError(t, err)
		if poison {
			assert.Equal(t, bytes.Repeat([]byte{sim.PoisonByte}, 4<<10), got)
		}
		require.NoError(t, b.Free(h2))
		require.NoError(t, b.Free(live))
	}
}

// Copies and memsets queued on cached memory are refused like kernel
// accesses, with CUDA_ERROR_ILLEGAL_ADDRESS.
func TestPoisonCacheRefusesCopies(t *testing.T) {
	b, dev := openSim(t, sim.Config{PoisonCache: true})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))

	s, err := dev.StreamCreate()
	require.NoError(t, err)
	err = dev.MemsetD8Async(ptr, 1, 64, s)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
	err = dev.MemcpyDtoDAsync(ptr+8, ptr, 8, s)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
	require.NoError(t, dev.StreamDestroy(s))
}

// A buffer the optimizer dispatcher pooled is still allocated, but with
// PoisonCache a kernel reading it through a kept device pointer fails until
// the pool hands it out again; the handle it was freed under is unknown.
func TestPoisonCacheCoversTheOptimizerPool(t *testing.T) {
	b, dev := openSim(t, sim.Config{PoisonCache: true})
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	live, err := b.Alloc(16)
	require.NoError(t, err)
	h, err := d.Alloc(64)
	require.NoError(t, err)
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 64)}))
	require.NoError(t, d.Free(h))
	assert.True(t, dev.Poisoned(ptr))

	_, err = b.Download(h.All(), nil)
	require.ErrorIs(t, err, core.ErrUnknownHandle, "reading a pooled buffer through a kept handle")
	err = b.Dispatch(staleReader(t, ptr, 64), []core.Buffer{live}, core.DispatchConfig{})
	require.ErrorIs(t, err, core.ErrDriver, "reading it through a kept device pointer")
	assert.Contains(t, err.Error(), "use after free")

	h2, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h2, Data: make([]byte, 64)}), "reused from the pool, usable again")
	require.NoError(t, b.Free(live))
	require.NoError(t, d.Close())
}

// The Backend's own paths never touch memory it cached: a mixed workload
// (many small and one large transfer each way, a batch, the optimizer pool,
// repeated so pools hit) runs clean and correct with PoisonCache on, with
// the planner held to each of the per-copy, packed and staged paths.
func TestBackendRunsCleanUnderPoisonCache(t *testing.T) {
	for _, kind := range []xferplan.Kind{xferplan.PerCopy, xferplan.Packed, xferplan.Staged} {
		t.Run(kind.String(), func(t *testing.T) {
			// Small chunks keep the staged path cheap under -race.
			b, _ := openSim(t, sim.Config{PoisonCache: true},
				core.WithTransferTuning(core.TransferTuning{Only: xferplan.Kinds(kind), ChunkBytes: 64 << 10}))
			poisonWorkload(t, b)
		})
	}
}

func poisonWorkload(t *testing.T, b *core.Backend) {
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	for round := range 2 {
		v := byte(round + 1)
		bufs := make([]core.Buffer, 40)
		ups := make([]core.UploadAt, len(bufs))
		for i := range bufs {
			bufs[i], err = b.Alloc(4 << 10)
			require.NoError(t, err)
			ups[i] = core.UploadAt{Buf: bufs[i], Data: bytes.Repeat([]byte{v + byte(i)}, 4<<10)}
		}
		require.NoError(t, b.Upload(ups...))
		got, err := b.DownloadMany(allOf(bufs), nil)
		require.NoError(t, err)
		for i := range got {
			require.Equal(t, ups[i].Data, got[i], "round %d buffer %d", round, i)
		}
		for _, h := range bufs {
			require.NoError(t, b.Free(h))
		}

		big, err := b.Alloc(1 << 20)
		require.NoError(t, err)
		data := bytes.Repeat([]byte{v}, 1<<20)
		require.NoError(t, b.Upload(core.UploadAt{Buf: big, Data: data}))
		back, err := b.Download(big.All(), nil)
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, back))
		require.NoError(t, b.Free(big))

		id, err := d.Alloc(64)
		require.NoError(t, err)
		out, err := b.Run(core.Batch{Fills: []core.Fill{{Buf: id, Value: v}}, Reads: []core.Range{{Buf: id, Len: 64}}}, nil)
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{v}, 64), out[0])
		require.NoError(t, d.Free(id))
	}
	require.NoError(t, d.Close())
}
