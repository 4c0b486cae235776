package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Each injected driver fault makes its call fail with the expected error kind
// and leaves the dispatcher's stats, pool, memory and live buffer as they were.
func TestOptimizerFaultsLeaveStateUnchanged(t *testing.T) {
	type faultCase struct {
		name string
		arm  func(dev *sim.Device)
		call func(d *core.OptimizerDispatcher, b *core.Backend, live core.Buffer) error
		kind error
	}
	cases := []faultCase{
		// Out of memory with nothing cached to give back is a budget refusal.
		{"alloc fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			func(d *core.OptimizerDispatcher, _ *core.Backend, _ core.Buffer) error {
				_, err := d.Alloc(128)
				return err
			}, core.ErrBudget},
		{"alloc returns null", func(dev *sim.Device) { dev.NullNth(sim.OpMemAlloc, 1) },
			func(d *core.OptimizerDispatcher, _ *core.Backend, _ core.Buffer) error {
				_, err := d.Alloc(128)
				return err
			}, core.ErrDriver},
		{"upload copy fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemcpyHtoDAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			func(d *core.OptimizerDispatcher, b *core.Backend, live core.Buffer) error {
				return b.Upload(core.UploadAt{Buf: live, Data: make([]byte, 64)})
			}, core.ErrDriver},
		{"read copy fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemcpyDtoHAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			func(d *core.OptimizerDispatcher, b *core.Backend, live core.Buffer) error {
				_, err := b.Download(live.All(), nil)
				return err
			}, core.ErrDriver},
		{"memset fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemsetD8Async, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			func(d *core.OptimizerDispatcher, b *core.Backend, live core.Buffer) error {
				_, err := b.Run(core.Batch{Clears: []core.Buffer{live}}, nil)
				return err
			}, core.ErrDriver},
		{"real free of an over-cap buffer fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			func(d *core.OptimizerDispatcher, b *core.Backend, live core.Buffer) error { return d.Free(live) }, core.ErrDriver},
		{"static alloc of the second payload fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemAlloc, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			func(d *core.OptimizerDispatcher, _ *core.Backend, _ core.Buffer) error {
				_, err := d.AcquireStaticUploads(1, [][]byte{{1, 2}, {3}, {4}})
				return err
			}, core.ErrBudget},
		{"static upload fails", func(dev *sim.Device) { dev.FailNth(sim.OpMemcpyHtoDAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			func(d *core.OptimizerDispatcher, _ *core.Backend, _ core.Buffer) error {
				// 32 bytes: one of the payloads comes from the pool.
				_, err := d.AcquireStaticUploads(1, [][]byte{make([]byte, 32), {3}})
				return err
			}, core.ErrDriver},
		{"static upload staging fails", func(dev *sim.Device) { dev.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			func(d *core.OptimizerDispatcher, _ *core.Backend, _ core.Buffer) error {
				// Larger than any pinned block the pool kept from earlier uploads.
				_, err := d.AcquireStaticUploads(2, [][]byte{make([]byte, 32), make([]byte, 2<<20)})
				return err
			}, core.ErrDriver},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Cap 40: the pooled 32-byte buffer fits, the live 64-byte one
			// does not, so freeing it is a real free.
			d, b, dev := openOpt(t, core.WithOptimizerPoolCap(40))
			ids := allocBufs(t, d, 64, 32)
			require.NoError(t, b.Upload(core.UploadAt{Buf: ids[0], Data: bytes.Repeat([]byte{9}, 64)}))
			require.NoError(t, d.Free(ids[1]))
			stats, resident, live := d.Stats(), b.MemoryStats().Allocated, dev.Live()

			c.arm(dev)
			err := c.call(d, b, ids[0])
			require.ErrorIs(t, err, c.kind)
			dev.ClearFaults()

			assert.Equal(t, stats, d.Stats())
			assert.Equal(t, []int{32}, core.OptimizerPooledLensForTest(d))
			assert.Equal(t, resident, b.MemoryStats().Allocated)
			assert.Equal(t, live.Allocations, dev.Live().Allocations)
			got, err := b.Download(ids[0].All(), nil)
			require.NoError(t, err, "the live id survived")
			assert.Equal(t, bytes.Repeat([]byte{9}, 64), got)
			require.NoError(t, d.Free(ids[0]))
		})
	}
}

// An eviction whose real free fails does not fail the Free that
// caused it: the evicted buffer is retired and Close frees it.
func TestOptimizerEvictionFailureRetiresForClose(t *testing.T) {
	d, b, dev := openOpt(t, core.WithOptimizerPoolCap(64))
	base := b.MemoryStats().Allocated
	ids := allocBufs(t, d, 64, 64)
	require.NoError(t, d.Free(ids[0]))
	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	require.NoError(t, d.Free(ids[1]))
	s := d.Stats()
	assert.Equal(t, 1, s.RetiredBuffers)
	assert.Equal(t, uint64(64), s.PooledBytes)
	assert.Equal(t, base+128, b.MemoryStats().Allocated)
	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
}

// Close frees live, pooled and static buffers, even acquired sets, and every
// later call on the dispatcher reports ErrClosed.
func TestOptimizerCloseReleasesEverything(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	base := b.MemoryStats().Allocated
	d, err := core.NewOptimizerDispatcher(b, core.WithOptimizerPoolCap(4096), core.WithStaticCacheCap(300))
	require.NoError(t, err)
	live := allocBufs(t, d, 64, 128)
	require.NoError(t, d.Free(live[1]))
	cached, err := d.AcquireStaticUploads(1, [][]byte{make([]byte, 100)})
	require.NoError(t, err)
	require.True(t, cached.Cached)
	uncached, err := d.AcquireStaticUploads(2, [][]byte{make([]byte, 400)})
	require.NoError(t, err)
	require.False(t, uncached.Cached)
	released, err := d.AcquireStaticUploads(3, [][]byte{make([]byte, 50)})
	require.NoError(t, err)
	require.NoError(t, d.ReleaseStaticUploads(released))
	require.Greater(t, b.MemoryStats().Allocated, base)

	// Acquired sets do not block Close: it ends them.
	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
	for name, err := range map[string]error{
		"Close":   d.Close(),
		"Free":    d.Free(live[0]),
		"Release": d.ReleaseStaticUploads(cached),
		"Alloc":   func() error { _, err := d.Alloc(8); return err }(),
		"Acquire": func() error { _, err := d.AcquireStaticUploads(1, [][]byte{{1}}); return err }(),
	} {
		assert.ErrorIs(t, err, core.ErrClosed, name)
	}
	_, err = b.Download(live[0].All(), nil)
	assert.ErrorIs(t, err, core.ErrUnknownHandle, "Close freed the dispatcher's buffers")
	assert.Equal(t, core.OptimizerStats{PoolCap: 4096, StaticCap: 300}, d.Stats())
	require.NoError(t, b.Close())
	assert.True(t, dev.Live().Zero(), "live after Backend.Close: %s", dev.Live())
}

// A dispatcher whose Backend was closed hands out nothing, closes cleanly,
// and no new dispatcher can be made over a closed or nil Backend.
func TestOptimizerAfterBackendClose(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	id := allocBufs(t, d, 64)[0]
	other := allocBufs(t, d, 64)[0]
	require.NoError(t, d.Free(other))
	require.NoError(t, b.Close())
	_, err = d.Alloc(64)
	require.ErrorIs(t, err, core.ErrClosed, "no pooled buffer of a closed Backend is handed out")
	_, err = b.Download(id.All(), nil)
	require.ErrorIs(t, err, core.ErrClosed)
	require.NoError(t, d.Close(), "the Backend already freed everything")
	_, err = core.NewOptimizerDispatcher(b)
	require.ErrorIs(t, err, core.ErrClosed)
	_, err = core.NewOptimizerDispatcher(nil)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

// Sixteen goroutines allocate, upload, read, run and free their own buffers
// and share static sets; every byte read must be the goroutine's own, and
// Close must return the Backend to its baseline.
func TestOptimizerConcurrentUse(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	base := b.MemoryStats().Allocated
	d, err := core.NewOptimizerDispatcher(b, core.WithOptimizerPoolCap(8<<10), core.WithStaticCacheCap(4<<10))
	require.NoError(t, err)
	const workers, rounds = 16, 30
	shared := [][][]byte{{bytes.Repeat([]byte{1}, 512)}, {bytes.Repeat([]byte{2}, 1024), {3}}, {bytes.Repeat([]byte{4}, 3000)}}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < rounds; i++ {
				n := []int{64, 256, 1000}[r.Intn(3)]
				id, err := d.Alloc(n)
				if err != nil {
					errs <- err
					return
				}
				want := bytes.Repeat([]byte{byte(w)}, n)
				if err := b.Upload(core.UploadAt{Buf: id, Data: want}); err != nil {
					errs <- err
					return
				}
				set, err := d.AcquireStaticUploads(uint64(i%2), shared[r.Intn(len(shared))])
				if err != nil {
					errs <- err
					return
				}
				out, err := b.Run(core.Batch{
					Reads: []core.Range{{Buf: id, Len: n}, {Buf: set.Bufs[0], Len: 1}},
				}, nil)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(out[0], want) {
					errs <- fmt.Errorf("worker %d round %d read another goroutine's bytes", w, i)
					return
				}
				if err := d.ReleaseStaticUploads(set); err != nil {
					errs <- err
					return
				}
				if err := d.Free(id); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s := d.Stats()
	assert.Zero(t, s.LiveIDs)
	assert.Zero(t, s.StaticSetsAcquired)
	assert.LessOrEqual(t, s.PooledBytes, uint64(8<<10))
	assert.LessOrEqual(t, s.StaticCachedBytes, uint64(4<<10))
	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
	require.NoError(t, b.Close())
	assert.True(t, dev.Live().Zero(), "live after Backend.Close: %s", dev.Live())
}

// The pool-hit round trip is the hot path: it must not allocate.
func TestOptimizerPoolHitDoesNotAllocate(t *testing.T) {
	d, _, dev := openOpt(t)
	id := allocBufs(t, d, 4096)[0]
	require.NoError(t, d.Free(id))
	calls := dev.CallCounts()
	allocs := testing.AllocsPerRun(100, func() {
		id, err := d.Alloc(4096)
		if err == nil {
			err = d.Free(id)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, calls, dev.CallCounts(), "no driver call on a pool hit")
}
