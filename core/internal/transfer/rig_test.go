package transfer

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/stats"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/fusion"
)

// testBuf is a caller's buffer in these tests: a device allocation with
// the in-flight uses a quarantine takes on it (HoldBuffers).
type testBuf struct {
	ptr  uint64
	n    int
	uses atomic.Int64
}

// rig is an Engine over a simulated device with pools, counters and a
// registry of its own, as core builds one for a Backend.
type rig struct {
	dev    *sim.Device
	drv    driver.Driver // what the pools and the engine use (dev, or a wrapper)
	e      *Engine[*testBuf]
	host   *hostmem.Pool
	dpool  *devmem.Pool
	launch *streams.Pool
	tel    stats.Counters
	pinned hostmem.Registry
	// loads counts Kernel calls; the kernels load once per rig.
	loads atomic.Int64
	mod   driver.Module
	funcs [2]driver.Function
}

// rigOpts changes what newRig builds.
type rigOpts struct {
	wrap     func(*sim.Device) driver.Driver // the driver the pools and engine see
	devTotal uint64                          // the device pool's memory (0: the device's)
}

// newRig returns a rig over a fresh simulated device under tuning t. Its
// cleanup closes the pools and requires the device to hold nothing.
func newRig(tb testing.TB, t Tuning, o rigOpts) *rig {
	tb.Helper()
	r := &rig{dev: sim.New(sim.Config{TotalMemory: 1 << 30})}
	r.drv = r.dev
	if o.wrap != nil {
		r.drv = o.wrap(r.dev)
	}
	total := o.devTotal
	if total == 0 {
		total = 1 << 30
	}
	r.host = hostmem.New(r.drv, hostmem.Config{Cap: 64 << 20, Helpers: EvictHelpers{}})
	r.dpool = devmem.New(r.drv, devmem.Config{Total: total, MaxCached: 64 << 20, MaxClassed: 1 << 20})
	r.launch = streams.NewPool(r.drv, nil, streams.DefaultMaxIdle)
	r.e = New(Config[*testBuf]{Driver: r.drv, Host: r.host, Dev: r.dpool, Launch: r.launch, Counters: &r.tel,
		Pinned: &r.pinned, Tuning: t, Kernel: r.kernel,
		HoldBuffers: func(items []streams.Item, _ string, bufs []*testBuf) []streams.Item {
			for _, b := range bufs {
				b.uses.Add(1)
				items = append(items, streams.Item{Kind: streams.BufferRef, Bytes: uint64(b.n),
					Release: func() { b.uses.Add(-1) }})
			}
			return items
		}})
	tb.Cleanup(func() {
		require.NoError(tb, r.launch.Close())
		require.NoError(tb, r.dpool.Close())
		require.NoError(tb, r.host.Close())
		if r.mod != 0 {
			require.NoError(tb, r.dev.ModuleUnload(r.mod))
		}
		sim.RequireNoLeaks(tb, r.dev)
	})
	return r
}

// kernel loads the scatter and gather kernels once, binding their Go
// twins, as core's program cache does.
func (r *rig) kernel(op string, k Kernel) (driver.Function, error) {
	r.loads.Add(1)
	if r.funcs[k] != 0 {
		return r.funcs[k], nil
	}
	m, err := r.dev.ModuleLoad(kernels.ScatterPTX)
	if err != nil {
		return 0, err
	}
	r.mod = m
	entries := [2]string{kernels.ScatterEntry, kernels.GatherEntry}
	twins := [2]driver.HostKernel{ScatterTwin, GatherTwin}
	for i := range r.funcs {
		f, err := r.dev.ModuleFunction(m, entries[i])
		if err != nil {
			return 0, err
		}
		if err := r.dev.BindHostKernel(f, twins[i]); err != nil {
			return 0, err
		}
		r.funcs[i] = f
	}
	return r.funcs[k], nil
}

// bufs allocates n device buffers of size(i) bytes, freed at cleanup
// (before the rig's own cleanup checks that nothing is live: cleanups run
// last-in first-out).
func (r *rig) bufs(tb testing.TB, n int, size func(i int) int) []*testBuf {
	tb.Helper()
	out := make([]*testBuf, n)
	for i := range out {
		ptr, err := r.dev.MemAlloc(uint64(size(i)))
		require.NoError(tb, err)
		out[i] = &testBuf{ptr: ptr, n: size(i)}
	}
	tb.Cleanup(func() {
		for _, b := range out {
			require.NoError(tb, r.dev.MemFree(b.ptr))
		}
	})
	return out
}

// pinnedSlice returns n bytes of pinned memory registered in the rig's
// registry, as core's AllocHostPinned makes. Its cleanup frees it through
// the registry, which refuses a region a copy still uses.
func (r *rig) pinnedSlice(tb testing.TB, n int) []byte {
	tb.Helper()
	buf, err := r.dev.HostAlloc(uint64(n))
	require.NoError(tb, err)
	reg, err := r.pinned.AddAlloc(buf)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		require.NoError(tb, r.pinned.Free(reg, nil, func(p unsafe.Pointer) error { return r.dev.HostFree(p) }))
	})
	return buf[:n]
}

// pattern returns n bytes that differ by buffer (i) and position.
func pattern(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*31 + k*7 + 1)
	}
	return b
}

// uploads returns one full-buffer upload copy per buffer, from data[i].
func uploads(bufs []*testBuf, data [][]byte) []fusion.UploadCopy {
	ups := make([]fusion.UploadCopy, len(bufs))
	for i, b := range bufs {
		ups[i] = fusion.UploadCopy{Handle: uint64(i + 1), Dst: b.ptr, Data: data[i]}
	}
	return ups
}

// reads returns one whole-buffer read request per buffer.
func reads(bufs []*testBuf) []fusion.ReadbackCopy {
	reqs := make([]fusion.ReadbackCopy, len(bufs))
	for i, b := range bufs {
		reqs[i] = fusion.ReadbackCopy{Handle: uint64(i + 1), Src: b.ptr, Len: b.n}
	}
	return reqs
}

// gather reads the buffers back whole through a drain into new slices, as
// core's DownloadResidentMany does.
func (r *rig) gather(tb testing.TB, bufs []*testBuf) ([][]byte, error) {
	tb.Helper()
	out := make([][]byte, len(bufs))
	g := r.e.NewRead(len(bufs), FreshDrain(out))
	for i, b := range bufs {
		g.Lens()[i] = b.n
	}
	if err := r.e.Gather("Gather", g, bufs, reads(bufs), len(bufs), nil); err != nil {
		return nil, err
	}
	defer g.Release()
	g.DrainAll()
	return out, nil
}
