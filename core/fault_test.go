package core_test

import (
	"fmt"
	"runtime"
	"sort"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// faultPath is one Backend call path: setup prepares a fresh Backend and
// returns the call to fault and a check that the caller's state survived.
type faultPath struct {
	name  string
	opts  []core.Option
	setup func(t *testing.T, b *core.Backend) (run func() error, unchanged func(t *testing.T))
}

// faultPaths lists the Backend call paths the fault-injection test faults,
// each with its setup.
func faultPaths() []faultPath {
	return []faultPath{
		{name: "Alloc pooled", setup: setupFaultAlloc},
		{name: "Alloc exact", opts: []core.Option{core.WithResidentPoolLimit(0)}, setup: setupFaultAlloc},
		{name: "Upload", setup: func(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
			hs := coldFaultBuffers(t, b, 3)
			ups := make([]core.UploadAt, len(hs))
			for i, h := range hs {
				ups[i] = core.UploadAt{Buf: h, Data: make([]byte, h.Len)}
			}
			return func() error { return b.Upload(ups...) }, func(*testing.T) {}
		}},
		{name: "Upload", setup: func(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
			hs := coldFaultBuffers(t, b, 2)
			ups := []core.UploadAt{{hs[0], 1, []byte{1, 2}}, {hs[1], 3, []byte{3}}, {hs[0], 50, []byte{4}}}
			return func() error { return b.Upload(ups...) }, func(*testing.T) {}
		}},
		{name: "DownloadMany", setup: func(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
			hs := coldFaultBuffers(t, b, 3)
			dst := [][]byte{[]byte("keep")}
			var got [][]byte
			return func() error {
					var err error
					got, err = b.DownloadMany(allOf(hs), dst)
					return err
				}, func(t *testing.T) {
					require.Len(t, got, 1)
					assert.Equal(t, "keep", string(got[0]))
				}
		}},
		{name: "DownloadMany of ranges", setup: func(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
			hs := coldFaultBuffers(t, b, 2)
			dst := [][]byte{[]byte("keep")}
			var got [][]byte
			return func() error {
					var err error
					got, err = b.DownloadMany([]core.Range{hs[0].Slice(0, 10), hs[1].Slice(5, 10), hs[0].Slice(50, 3)}, dst)
					return err
				}, func(t *testing.T) {
					require.Len(t, got, 1)
					assert.Equal(t, "keep", string(got[0]))
				}
		}},
		{name: "AllocHostPinned", setup: func(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
			return func() error {
				p, err := b.AllocHostPinned(100)
				if err != nil {
					return err
				}
				return p.Free()
			}, func(*testing.T) {}
		}},
		{name: "PinHostBuffer", setup: setupFaultPinHostBuffer},
		{name: "UploadAsync+SynchronizeUploads", setup: setupFaultUploadAsync},
	}
}

// setupFaultAlloc faults one Alloc (freed again on success) and checks that
// a failed Alloc handed back no buffer.
func setupFaultAlloc(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
	var got core.Buffer
	return func() error {
			h, err := b.Alloc(3000)
			if err == nil {
				got = h
				return b.Free(h)
			}
			return err
		}, func(t *testing.T) {
			assert.Equal(t, core.Buffer{}, got)
		}
}

// coldFaultBuffers allocates n buffers of slightly different sizes without
// uploading to them, so the path's first transfer meets cold pools.
func coldFaultBuffers(t *testing.T, b *core.Backend, n int) []core.Buffer {
	hs := make([]core.Buffer, n)
	for i := range hs {
		h, err := b.Alloc(100 + i)
		require.NoError(t, err) // not uploaded: the path's first transfer meets cold pools
		hs[i] = h
	}
	return hs
}

// setupFaultPinHostBuffer faults pinning then unpinning a Go byte slice; a
// retry after a failed unpin only unpins.
func setupFaultPinHostBuffer(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
	mem := make([]byte, 256)
	t.Cleanup(func() { runtime.KeepAlive(mem) })
	pinned := false // a failed unpin keeps the range pinned; the retry only unpins
	return func() error {
		if !pinned {
			if err := b.PinHostBuffer(unsafe.Pointer(&mem[0]), len(mem)); err != nil {
				return err
			}
			pinned = true
		}
		if err := b.UnpinHostBuffer(unsafe.Pointer(&mem[0])); err != nil {
			return err
		}
		pinned = false
		return nil
	}, func(*testing.T) {}
}

// setupFaultUploadAsync faults an UploadAsync from pinned memory and the
// SynchronizeUploads that waits for it; a failed wait is retried once so
// the queued upload drains.
func setupFaultUploadAsync(t *testing.T, b *core.Backend) (func() error, func(*testing.T)) {
	hs := coldFaultBuffers(t, b, 1)
	p, err := b.AllocHostPinned(64)
	require.NoError(t, err)
	return func() error {
		if err := b.UploadAsync(core.UploadAt{Buf: hs[0], Offset: 0, Data: p.Bytes()[:64]}); err != nil {
			return err
		}
		if err := b.SynchronizeUploads(); err != nil {
			// A failed wait leaves the upload queued; a retry drains it.
			if err2 := b.SynchronizeUploads(); err2 != nil {
				return fmt.Errorf("retry: %w", err2)
			}
			return err
		}
		return nil
	}, func(*testing.T) {}
}

// TestFaultInjection fails, one at a time, every driver call each path
// makes (the nth call of each operation, for every n the path reaches), and
// returns a null result with success from every call that hands out a
// handle or pointer. Each failure must surface as ErrDriver, leave resident
// accounting and the caller's outputs as they were, hold no launch lease,
// leave the Backend working, and leak nothing once it is closed.
func TestFaultInjection(t *testing.T) {
	nullable := map[sim.Op]bool{sim.OpMemGetInfo: true, sim.OpMemAlloc: true, sim.OpHostAlloc: true, sim.OpStreamCreate: true, sim.OpEventCreate: true}
	for _, path := range faultPaths() {
		t.Run(path.name, func(t *testing.T) {
			// A dry run finds which driver calls the path makes, and how often.
			b, dev := openSim(t, sim.Config{}, path.opts...)
			run, _ := path.setup(t, b)
			before := dev.CallCounts()
			require.NoError(t, run())
			var ops []sim.Op
			counts := map[sim.Op]uint64{}
			for op, n := range dev.CallCounts() {
				if d := n - before[op]; d > 0 && op != sim.OpMemFree && op != sim.OpHostFree {
					ops = append(ops, op)
					counts[op] = d
				}
			}
			sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
			require.NotEmpty(t, ops)

			for _, op := range ops {
				for n := 1; n <= int(counts[op]); n++ {
					modes := []string{"fail"}
					if nullable[op] {
						modes = append(modes, "null")
					}
					for _, mode := range modes {
						t.Run(fmt.Sprintf("%s %s #%d", mode, op, n), func(t *testing.T) {
							b, dev := openSim(t, sim.Config{}, path.opts...)
							run, unchanged := path.setup(t, b)
							resident := b.MemoryStats().Allocated
							if mode == "fail" {
								dev.FailNth(op, n, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
							} else {
								dev.NullNth(op, n)
							}
							err := run()
							requireKind(t, err, core.ErrDriver, op.String())
							dev.ClearFaults()
							assert.Equal(t, resident, b.MemoryStats().Allocated)
							assert.Zero(t, b.LaunchResourceCounts().Leases)
							unchanged(t)
							require.NoError(t, run(), "the Backend works after the failure")
						})
					}
				}
			}
		})
	}
}
