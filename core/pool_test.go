package core_test

import (
	"context"
	"log/slog"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// logCapture is a slog.Handler that keeps the messages of error records, so
// tests can assert that a repair or a failed free was reported.
type logCapture struct {
	mu   sync.Mutex
	errs []string
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCapture) WithGroup(string) slog.Handler            { return h }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.errs = append(h.errs, r.Message)
		h.mu.Unlock()
	}
	return nil
}

func (h *logCapture) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}

func newLog() (*slog.Logger, *logCapture) {
	h := &logCapture{}
	return slog.New(h), h
}

func newDev() *sim.Device { return sim.New(sim.Config{TotalMemory: 1 << 30}) }

// requireNoLive fails the test when the simulated device still holds any
// allocation, pinned buffer, stream, event or module.
func requireNoLive(t *testing.T, dev *sim.Device) {
	t.Helper()
	require.Zero(t, dev.Live(), "simulated device still holds live objects")
}

// requireErrKind asserts err is a *core.Error of the sentinel's kind whose
// message contains every fragment.
func requireErrKind(t *testing.T, err error, sentinel error, fragments ...string) *core.Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	for _, f := range fragments {
		assert.Contains(t, err.Error(), f)
	}
	assert.Contains(t, err.Error(), "Fix: ")
	return ce
}

func TestDevicePoolRoundsRequestsUpToPowerOfTwoBuckets(t *testing.T) {
	cases := []struct{ n, bucket int }{
		{1, 1}, {2, 2}, {3, 4}, {100, 128}, {4096, 4096}, {4097, 8192}, {1<<20 + 1, 1 << 21},
	}
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<30, nil)
	for _, c := range cases {
		a, err := p.Get("test", c.n)
		require.NoError(t, err, "n=%d", c.n)
		assert.Equal(t, c.bucket, a.Size(), "n=%d", c.n)
		assert.Equal(t, c.n, a.N())
		assert.NotZero(t, a.Ptr())
		p.Put(a)
	}
	assert.Equal(t, uint64(len(cases)), dev.Calls(sim.OpMemAlloc))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestDevicePoolRejectsBadRequestsWithoutTouchingTheDriver(t *testing.T) {
	cases := []struct {
		name string
		n    int
		want []string
	}{
		{"zero", 0, []string{"request of 0 bytes"}},
		{"negative", -5, []string{"request of -5 bytes"}},
		{"no bucket", math.MaxInt, []string{"no power-of-two bucket"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDev()
			p := core.NewDevicePool(dev, 1<<20, nil)
			a, err := p.Get("AllocateThing", c.n)
			ce := requireErrKind(t, err, core.ErrInvalidArgument, append(c.want, "AllocateThing")...)
			assert.Equal(t, "AllocateThing", ce.Op)
			assert.Equal(t, core.DeviceAlloc{}, a)
			assert.Zero(t, dev.Calls(sim.OpMemAlloc))
			assert.Zero(t, p.CachedBytes())
			assert.Zero(t, p.AllocatedBytes())
		})
	}
}

func TestDevicePoolHitsReuseTheBucketAndMissesAllocate(t *testing.T) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<20, nil)

	a, err := p.Get("test", 100)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), dev.Calls(sim.OpMemAlloc))
	assert.Equal(t, uint64(128), p.AllocatedBytes())
	assert.Zero(t, p.CachedBytes())

	p.Put(a)
	assert.Equal(t, uint64(128), p.CachedBytes())
	assert.Equal(t, 1, p.Cached(128))
	assert.Zero(t, dev.Calls(sim.OpMemFree))

	// Same bucket, different request size: a hit on the same pointer.
	b, err := p.Get("test", 65)
	require.NoError(t, err)
	assert.Equal(t, a.Ptr(), b.Ptr())
	assert.Equal(t, 65, b.N())
	assert.Equal(t, uint64(1), dev.Calls(sim.OpMemAlloc))
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(128), p.AllocatedBytes())

	// A cached 128-byte block never serves another bucket.
	p.Put(b)
	c, err := p.Get("test", 129)
	require.NoError(t, err)
	assert.NotEqual(t, b.Ptr(), c.Ptr())
	assert.Equal(t, 256, c.Size())
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemAlloc))
	assert.Equal(t, uint64(128), p.CachedBytes())
	assert.Equal(t, uint64(128+256), p.AllocatedBytes())

	p.Put(c)
	assert.Equal(t, uint64(128+256), p.CachedBytes())
	require.NoError(t, p.Close())
	assert.Zero(t, p.CachedBytes())
	assert.Zero(t, p.AllocatedBytes())
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemFree))
	requireNoLive(t, dev)
}

func TestDevicePoolByteCapFreesPutsThatDoNotFit(t *testing.T) {
	cases := []struct {
		name       string
		cap        uint64
		n, count   int
		wantCached int
	}{
		{"cap holds two of three", 1024, 512, 3, 2},
		{"cap holds all", 4096, 512, 3, 3},
		{"zero cap caches nothing", 0, 512, 3, 0},
		{"bucket above cap is never cached", 256, 512, 2, 0},
		{"cap not a multiple of the bucket", 1500, 512, 4, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDev()
			p := core.NewDevicePool(dev, c.cap, nil)
			allocs := make([]core.DeviceAlloc, c.count)
			for i := range allocs {
				var err error
				allocs[i], err = p.Get("test", c.n)
				require.NoError(t, err)
			}
			for _, a := range allocs {
				p.Put(a)
				assert.LessOrEqual(t, p.CachedBytes(), c.cap)
			}
			assert.Equal(t, c.wantCached, p.Cached(c.n))
			assert.Equal(t, uint64(c.wantCached*c.n), p.CachedBytes())
			assert.Equal(t, uint64(c.count-c.wantCached), dev.Calls(sim.OpMemFree), "puts over the cap free for real")
			assert.Equal(t, uint64(c.wantCached*c.n), p.AllocatedBytes())
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestDevicePoolSlotsPerBucketAreBoundedAt1024(t *testing.T) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<40, nil) // the byte cap never binds here
	allocs := make([]core.DeviceAlloc, 1030)
	for i := range allocs {
		var err error
		allocs[i], err = p.Get("test", 1)
		require.NoError(t, err)
	}
	for _, a := range allocs {
		p.Put(a)
	}
	assert.Equal(t, 1024, p.Cached(1))
	assert.Equal(t, uint64(1024), p.CachedBytes())
	assert.Equal(t, uint64(6), dev.Calls(sim.OpMemFree))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestDevicePoolFreesPutsOfUnknownOrMalformedAllocations(t *testing.T) {
	dev := newDev()
	log, logs := newLog()
	p := core.NewDevicePool(dev, 1<<20, log)

	// A bucket that never missed in this pool does not cache.
	ptr, err := dev.MemAlloc(1024)
	require.NoError(t, err)
	p.SetAllocatedBytes(1024) // as if this pool had allocated it
	p.Put(core.MakeDeviceAlloc(ptr, 1024, 1024))
	assert.Zero(t, p.CachedBytes())
	assert.Zero(t, p.AllocatedBytes())
	assert.Equal(t, uint64(1), dev.Calls(sim.OpMemFree))

	// A size that is not a power of two is freed and logged.
	ptr, err = dev.MemAlloc(1000)
	require.NoError(t, err)
	p.SetAllocatedBytes(1000)
	p.Put(core.MakeDeviceAlloc(ptr, 1000, 1000))
	assert.Zero(t, p.CachedBytes())
	assert.Zero(t, p.AllocatedBytes())
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemFree))
	assert.Len(t, logs.errors(), 1)

	// The zero allocation is ignored.
	p.Put(core.DeviceAlloc{})
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemFree))

	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestDevicePoolDriverFailuresLeaveNoTrace(t *testing.T) {
	cases := []struct {
		name   string
		arm    func(*sim.Device)
		code   cudaapi.Result
		phrase string
	}{
		{"out of memory", func(d *sim.Device) { d.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "MemAlloc of a 4096-byte bucket for a 3000-byte request failed"},
		{"null success", func(d *sim.Device) { d.NullNth(sim.OpMemAlloc, 1) },
			0, "MemAlloc returned success with a null result"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDev()
			p := core.NewDevicePool(dev, 1<<20, nil)
			warm, err := p.Get("test", 3000)
			require.NoError(t, err)
			p.Put(warm)
			hit, err := p.Get("test", 3000) // empty the bucket so the next get misses
			require.NoError(t, err)
			cached, allocated := p.CachedBytes(), p.AllocatedBytes()

			c.arm(dev)
			a, err := p.Get("Upload", 3000)
			ce := requireErrKind(t, err, core.ErrDriver, c.phrase, "Upload")
			assert.Equal(t, c.code, ce.Code)
			assert.Equal(t, core.DeviceAlloc{}, a)
			assert.Equal(t, cached, p.CachedBytes())
			assert.Equal(t, allocated, p.AllocatedBytes())

			p.Put(hit)
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestDevicePoolLogsFailedFreesAndKeepsCounting(t *testing.T) {
	dev := newDev()
	log, logs := newLog()
	p := core.NewDevicePool(dev, 0, log) // every put frees
	a, err := p.Get("test", 64)
	require.NoError(t, err)
	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	p.Put(a)
	require.Len(t, logs.errors(), 1)
	assert.Contains(t, logs.errors()[0], "MemFree failed")
	assert.Zero(t, p.AllocatedBytes(), "the pool gave the allocation up")
	require.NoError(t, dev.MemFree(a.Ptr()), "the driver refused the free, so the memory is still live")
	requireNoLive(t, dev)
}

func TestDevicePoolRepairsUnderflowedAccountingToZeroAndLogs(t *testing.T) {
	dev := newDev()
	log, logs := newLog()
	p := core.NewDevicePool(dev, 1<<20, log)
	a, err := p.Get("test", 256)
	require.NoError(t, err)
	p.Put(a)
	require.Equal(t, uint64(256), p.CachedBytes())

	p.SetCachedBytes(100) // corrupt: less than the 256 bytes really cached
	b, err := p.Get("test", 256)
	require.NoError(t, err, "a hit still succeeds: the reference repairs rather than failing reuse")
	assert.Equal(t, a.Ptr(), b.Ptr())
	assert.Zero(t, p.CachedBytes())
	errs := logs.errors()
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0], "device pool cached bytes underflowed; repaired accounting to zero")

	p.SetAllocatedBytes(0) // corrupt the live count too: the close-time release repairs
	p.Put(b)
	require.NoError(t, p.Close())
	assert.Zero(t, p.AllocatedBytes())
	assert.Len(t, logs.errors(), 2)
	requireNoLive(t, dev)
}

func TestDevicePoolCloseFreesEverythingAndRefusesGets(t *testing.T) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<20, nil)
	var out []core.DeviceAlloc
	for _, n := range []int{1, 7, 64, 64, 4000, 70000} {
		a, err := p.Get("test", n)
		require.NoError(t, err)
		out = append(out, a)
	}
	for _, a := range out[:5] {
		p.Put(a)
	}
	require.NoError(t, p.Close())
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(out[5].Size()), p.AllocatedBytes(), "the one still out is still counted")

	_, err := p.Get("Late", 64)
	requireErrKind(t, err, core.ErrClosed, "Late", "device allocation pool is closed")
	p.Put(out[5]) // a put after close frees for real
	assert.Zero(t, p.AllocatedBytes())
	require.NoError(t, p.Close(), "close is idempotent")
	requireNoLive(t, dev)
}

func TestDevicePoolCloseReturnsTheFirstFreeFailureAndTriesEveryPointer(t *testing.T) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<20, nil)
	a, _ := p.Get("test", 64)
	b, _ := p.Get("test", 128)
	p.Put(a)
	p.Put(b)
	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	err := p.Close()
	ce := requireErrKind(t, err, core.ErrDriver, "MemFree")
	assert.Equal(t, cudaapi.CUDA_ERROR_INVALID_VALUE, ce.Code)
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemFree))
	assert.Zero(t, p.CachedBytes())
	// Exactly one pointer is still live on the device: the refused one.
	freed := 0
	for _, x := range []core.DeviceAlloc{a, b} {
		if dev.MemFree(x.Ptr()) == nil {
			freed++
		}
	}
	assert.Equal(t, 1, freed)
	requireNoLive(t, dev)
}

func TestDevicePoolConcurrentGetPut(t *testing.T) {
	dev := newDev()
	const capBytes = 64 << 10
	p := core.NewDevicePool(dev, capBytes, nil)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			var held []core.DeviceAlloc
			for range 300 {
				if len(held) > 0 && rng.Intn(2) == 0 {
					i := rng.Intn(len(held))
					p.Put(held[i])
					held = append(held[:i], held[i+1:]...)
					continue
				}
				a, err := p.Get("test", 1+rng.Intn(8<<10))
				if !assert.NoError(t, err) {
					return
				}
				held = append(held, a)
			}
			for _, a := range held {
				p.Put(a)
			}
		}(int64(g))
	}
	wg.Wait()
	assert.LessOrEqual(t, p.CachedBytes(), uint64(capBytes))
	assert.Equal(t, p.CachedBytes(), p.AllocatedBytes(), "everything handed out came back")
	// MemAlloc calls minus MemFree calls are exactly what is cached.
	live := dev.Calls(sim.OpMemAlloc) - dev.Calls(sim.OpMemFree)
	total := 0
	for i := range 14 {
		total += p.Cached(1 << i)
	}
	assert.Equal(t, uint64(total), live)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestDevicePoolHitAllocatesNothing(t *testing.T) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<20, nil)
	a, err := p.Get("test", 4096)
	require.NoError(t, err)
	p.Put(a)
	allocs := testing.AllocsPerRun(1000, func() {
		a, err := p.Get("test", 4096)
		if err != nil {
			panic(err)
		}
		p.Put(a)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, uint64(1), dev.Calls(sim.OpMemAlloc))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func BenchmarkDevicePoolHit(b *testing.B) {
	dev := newDev()
	p := core.NewDevicePool(dev, 1<<20, nil)
	a, err := p.Get("bench", 4096)
	require.NoError(b, err)
	p.Put(a)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a, err := p.Get("bench", 4096)
		if err != nil {
			b.Fatal(err)
		}
		p.Put(a)
	}
	b.StopTimer()
	require.NoError(b, p.Close())
}
