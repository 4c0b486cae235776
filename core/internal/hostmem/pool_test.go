package hostmem

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestHostPoolHitsReuseTheBucketAndMissesAllocate(t *testing.T) {
	dev := newHost()
	p := newPool(dev, 1<<20, nil)

	a, err := p.Lend("test", 1000)
	require.NoError(t, err)
	require.Len(t, a.Bytes(), 1024, "a block spans its whole bucket")
	a.Bytes()[0], a.Bytes()[1023] = 0xAB, 0xCD
	assert.Equal(t, uint64(1), dev.Count(opHostAlloc))
	assert.Equal(t, uint64(1024), p.ReservedBytes())

	p.Return(a)
	assert.Equal(t, uint64(1024), p.CachedBytes())
	assert.Zero(t, dev.Count(opHostFree))

	b, err := p.Lend("test", 513)
	require.NoError(t, err)
	assert.Same(t, &a.Bytes()[0], &b.Bytes()[0], "a hit hands back the same pinned memory")
	assert.Equal(t, byte(0xCD), b.Bytes()[1023], "a hit does not clear the block")
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(1), dev.Count(opHostAlloc))

	c, err := p.Lend("test", 1025)
	require.NoError(t, err)
	assert.Len(t, c.Bytes(), 2048)
	assert.Equal(t, uint64(2), dev.Count(opHostAlloc))

	p.Return(b)
	p.Return(c)
	assert.Equal(t, uint64(1024+2048), p.CachedBytes())
	require.NoError(t, p.Close())
	assert.Zero(t, p.CachedBytes())
	assert.Zero(t, p.ReservedBytes())
	assert.Equal(t, uint64(2), dev.Count(opHostFree))
	requireNoLive(t, dev)
}

func TestHostPoolRejectsBadRequestsWithoutTouchingTheDriver(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt, math.MaxInt} {
		dev := newHost()
		p := newPool(dev, 1<<20, nil)
		b, err := p.Lend("Stage", n)
		requireErrKind(t, err, errs.ErrInvalidArgument, "Stage", "pinned host allocation request")
		assert.Nil(t, b.Bytes())
		assert.Zero(t, dev.Count(opHostAlloc))
		assert.Zero(t, p.ReservedBytes())
	}
}

func TestHostPoolCapAndSlotsBoundTheCache(t *testing.T) {
	cases := []struct {
		name       string
		cap        uint64
		n, count   int
		wantCached int
	}{
		{"cap holds two of three", 8192, 4096, 3, 2},
		{"zero cap caches nothing", 0, 64, 2, 0},
		{"slots clamp at 1024", 1 << 40, 1, 1030, 1024},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newHost()
			p := newPool(dev, c.cap, nil)
			blocks := make([]Block, c.count)
			for i := range blocks {
				var err error
				blocks[i], err = p.Lend("test", c.n)
				require.NoError(t, err)
			}
			for _, b := range blocks {
				p.Return(b)
			}
			assert.Equal(t, c.wantCached, p.cache.count(c.n))
			assert.Equal(t, uint64(c.wantCached*c.n), p.CachedBytes())
			assert.Equal(t, uint64(c.wantCached*c.n), p.ReservedBytes())
			assert.Equal(t, uint64(c.count-c.wantCached), dev.Count(opHostFree))
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

// shortHostAlloc is a driver whose HostAlloc returns one byte less than asked.
type shortHostAlloc struct{ *fakeHost }

func (d shortHostAlloc) HostAlloc(n uint64) ([]byte, error) {
	buf, err := d.fakeHost.HostAlloc(n)
	if err != nil || len(buf) == 0 {
		return buf, err
	}
	return buf[:len(buf)-1], nil
}

func TestHostPoolDriverFailuresLeaveNoTrace(t *testing.T) {
	cases := []struct {
		name   string
		drv    func(*fakeHost) Host
		code   cudaapi.Result
		phrase string
	}{
		{"out of memory", func(d *fakeHost) Host {
			d.FailNth(opHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
			return d
		}, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "HostAlloc of a 128-byte bucket for a 100-byte request failed"},
		{"null success", func(d *fakeHost) Host {
			d.NullNth(opHostAlloc, 1)
			return d
		}, 0, "HostAlloc returned success with a null result"},
		{"wrong length", func(d *fakeHost) Host { return shortHostAlloc{d} },
			0, "HostAlloc of 128 bytes returned 127 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newHost()
			p := newPool(c.drv(dev), 1<<20, nil)
			b, err := p.Lend("Upload", 100)
			ce := requireErrKind(t, err, errs.ErrDriver, "Upload", c.phrase)
			assert.Equal(t, c.code, ce.Code)
			assert.Nil(t, b.Bytes())
			assert.Zero(t, p.CachedBytes())
			assert.Zero(t, p.ReservedBytes())
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestHostPoolFreesPutsOfUnknownOrMalformedBlocks(t *testing.T) {
	dev := newHost()
	log, logs := newLog()
	p := newPool(dev, 1<<20, log)

	buf, err := dev.HostAlloc(512)
	require.NoError(t, err)
	p.Return(Block{buf: buf}) // bucket 512 never missed here
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(1), dev.Count(opHostFree))
	assert.Len(t, logs.Errors(), 1, "the allocated count underflowed and was repaired")

	buf, err = dev.HostAlloc(300)
	require.NoError(t, err)
	p.Return(Block{buf: buf})
	assert.Equal(t, uint64(2), dev.Count(opHostFree))
	assert.Zero(t, p.CachedBytes())

	p.Return(Block{})
	assert.Equal(t, uint64(2), dev.Count(opHostFree))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolRepairsUnderflowedAccountingToZeroAndLogs(t *testing.T) {
	dev := newHost()
	log, logs := newLog()
	p := newPool(dev, 1<<20, log)
	a, err := p.Lend("test", 64)
	require.NoError(t, err)
	p.Return(a)
	p.cache.cached.Store(1)
	_, err = p.Lend("test", 64)
	require.NoError(t, err)
	assert.Zero(t, p.CachedBytes())
	require.Len(t, logs.Errors(), 1)
	assert.Contains(t, logs.Errors()[0], "pinned host pool cached bytes underflowed; repaired accounting to zero")
	p.Return(a)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolCloseFreesEverythingAndRefusesGets(t *testing.T) {
	dev := newHost()
	p := newPool(dev, 1<<20, nil)
	a, err := p.Lend("test", 64)
	require.NoError(t, err)
	b, err := p.Lend("test", 4096)
	require.NoError(t, err)
	p.Return(a)
	dev.FailNth(opHostFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	requireErrKind(t, p.Close(), errs.ErrDriver, "HostFree")
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(64+4096), p.ReservedBytes(), "the block HostFree refused is still counted")

	_, err = p.Lend("Late", 64)
	requireErrKind(t, err, errs.ErrClosed, "Late", "pinned host pool is closed")
	p.Return(b)
	assert.Equal(t, uint64(64), p.ReservedBytes())
	require.NoError(t, p.Close(), "closing again retries the refused free")
	assert.Zero(t, p.ReservedBytes())
	requireNoLive(t, dev)
}

func TestHostPoolConcurrentGetPut(t *testing.T) {
	dev := newHost()
	p := newPool(dev, 256<<10, nil)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := 1 + (g*7919+i*104729)%(16<<10)
				b, err := p.Lend("test", n)
				if !assert.NoError(t, err) {
					return
				}
				b.Bytes()[0], b.Bytes()[n-1] = byte(g), byte(i) // the race detector sees shared blocks
				p.Return(b)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, p.CachedBytes(), uint64(256<<10))
	assert.Equal(t, p.CachedBytes(), p.ReservedBytes())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolHitAllocatesNothing(t *testing.T) {
	dev := newHost()
	p := newPool(dev, 1<<20, nil)
	b, err := p.Lend("test", 4096)
	require.NoError(t, err)
	p.Return(b)
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := p.Lend("test", 4096)
		if err != nil {
			panic(err)
		}
		p.Return(b)
	})
	assert.Zero(t, allocs)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func BenchmarkHostPoolHit(b *testing.B) {
	dev := newHost()
	p := newPool(dev, 1<<20, nil)
	blk, err := p.Lend("bench", 4096)
	require.NoError(b, err)
	p.Return(blk)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		blk, err := p.Lend("bench", 4096)
		if err != nil {
			b.Fatal(err)
		}
		p.Return(blk)
	}
	b.StopTimer()
	require.NoError(b, p.Close())
}

// TestHostPoolTellsTheNotifierWhatIsCached: a driver that is a
// CacheNotifier hears of every block entering the cache and every one
// leaving it for a caller.
func TestHostPoolTellsTheNotifierWhatIsCached(t *testing.T) {
	dev := newHost()
	p := newPool(notifyingHost{dev}, 1<<20, nil)
	a, err := p.Lend("test", 64)
	require.NoError(t, err)
	b, err := p.Lend("test", 64)
	require.NoError(t, err)
	assert.Zero(t, dev.cached.Load(), "fresh blocks were never cached")
	p.Return(a)
	p.Return(b)
	assert.Equal(t, int64(2), dev.cached.Load())
	a, err = p.Lend("test", 64)
	require.NoError(t, err)
	assert.Equal(t, int64(1), dev.cached.Load())
	p.Return(a)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolTrimFreesTheCacheAndKeepsWhatFailed: Trim frees every cached
// block; one HostFree refuses stays cached (and counted) for the next Trim,
// which frees it; blocks lent meanwhile are untouched and cached later.
func TestHostPoolTrimFreesTheCacheAndKeepsWhatFailed(t *testing.T) {
	dev := newHost()
	p := newPool(dev, 1<<20, nil)
	a, err := p.Lend("test", 64)
	require.NoError(t, err)
	b, err := p.Lend("test", 4096)
	require.NoError(t, err)
	held, err := p.Lend("test", 512)
	require.NoError(t, err)
	p.Return(a)
	p.Return(b)
	dev.FailNth(opHostFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	requireErrKind(t, p.Trim("Trim"), errs.ErrDriver, "Trim", "HostFree")
	assert.Equal(t, uint64(1), uint64(p.cache.count(64)+p.cache.count(4096)), "the refused block stays cached")
	require.NoError(t, p.Trim("Trim"))
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(512), p.ReservedBytes(), "the lent block is untouched")
	p.Return(held)
	assert.Equal(t, uint64(512), p.CachedBytes())
	n, _ := p.UnfreedBlocks()
	assert.Zero(t, n)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestSecondSetPinsOnlyForReadbacksThatFollowEachOther: a readback that
// finds one set notes its end; the next one within the spare window pins
// a second set, after which the bucket lets readbacks defer eviction.
func TestSecondSetPinsOnlyForReadbacksThatFollowEachOther(t *testing.T) {
	const size, k = 64 << 10, 2
	dev := newHost()
	p := New(dev, Config{Cap: 1 << 20, SpareWindow: time.Hour})
	read := func() (bool, SecondSet) {
		blocks := make([]Block, k)
		for i := range blocks {
			var err error
			blocks[i], err = p.Lend("test", size)
			require.NoError(t, err)
		}
		deferred, second := p.DeferEviction(size, k)
		for _, b := range blocks {
			p.Return(b)
		}
		return deferred, second
	}
	deferred, second := read()
	assert.False(t, deferred, "one set")
	second.End()
	assert.Equal(t, uint64(k), dev.Count(opHostAlloc), "the first readback pinned no second set")
	deferred, second = read()
	assert.False(t, deferred, "still one set")
	second.End()
	assert.Equal(t, uint64(2*k), dev.Count(opHostAlloc), "the second readback, within the window, pinned a second set")
	deferred, second = read()
	assert.True(t, deferred, "two sets")
	second.End()
	assert.Equal(t, uint64(2*k), dev.Count(opHostAlloc))
	SecondSet{}.End() // the zero value does nothing
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}
