package core_test

import (
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestHostPoolHitsReuseTheBucketAndMissesAllocate(t *testing.T) {
	dev := newDev()
	p := core.NewHostPool(dev, 1<<20, nil)

	a, err := p.Get("test", 1000)
	require.NoError(t, err)
	require.Len(t, a.Buf(), 1024, "a block spans its whole bucket")
	a.Buf()[0], a.Buf()[1023] = 0xAB, 0xCD
	assert.Equal(t, uint64(1), dev.Calls(sim.OpHostAlloc))
	assert.Equal(t, uint64(1024), p.AllocatedBytes())

	p.Put(a)
	assert.Equal(t, uint64(1024), p.CachedBytes())
	assert.Zero(t, dev.Calls(sim.OpHostFree))

	b, err := p.Get("test", 513)
	require.NoError(t, err)
	assert.Same(t, &a.Buf()[0], &b.Buf()[0], "a hit hands back the same pinned memory")
	assert.Equal(t, byte(0xCD), b.Buf()[1023], "a hit does not clear the block")
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(1), dev.Calls(sim.OpHostAlloc))

	c, err := p.Get("test", 1025)
	require.NoError(t, err)
	assert.Len(t, c.Buf(), 2048)
	assert.Equal(t, uint64(2), dev.Calls(sim.OpHostAlloc))

	p.Put(b)
	p.Put(c)
	assert.Equal(t, uint64(1024+2048), p.CachedBytes())
	require.NoError(t, p.Close())
	assert.Zero(t, p.CachedBytes())
	assert.Zero(t, p.AllocatedBytes())
	assert.Equal(t, uint64(2), dev.Calls(sim.OpHostFree))
	requireNoLive(t, dev)
}

func TestHostPoolRejectsBadRequestsWithoutTouchingTheDriver(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt, math.MaxInt} {
		dev := newDev()
		p := core.NewHostPool(dev, 1<<20, nil)
		b, err := p.Get("Stage", n)
		requireErrKind(t, err, core.ErrInvalidArgument, "Stage", "pinned host allocation request")
		assert.Nil(t, b.Buf())
		assert.Zero(t, dev.Calls(sim.OpHostAlloc))
		assert.Zero(t, p.AllocatedBytes())
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
			dev := newDev()
			p := core.NewHostPool(dev, c.cap, nil)
			blocks := make([]core.PinnedBlock, c.count)
			for i := range blocks {
				var err error
				blocks[i], err = p.Get("test", c.n)
				require.NoError(t, err)
			}
			for _, b := range blocks {
				p.Put(b)
			}
			assert.Equal(t, c.wantCached, p.Cached(c.n))
			assert.Equal(t, uint64(c.wantCached*c.n), p.CachedBytes())
			assert.Equal(t, uint64(c.wantCached*c.n), p.AllocatedBytes())
			assert.Equal(t, uint64(c.count-c.wantCached), dev.Calls(sim.OpHostFree))
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

// shortHostAlloc is a driver whose HostAlloc returns one byte less than asked.
type shortHostAlloc struct{ *sim.Device }

func (d shortHostAlloc) HostAlloc(n uint64) ([]byte, error) {
	buf, err := d.Device.HostAlloc(n)
	if err != nil || len(buf) == 0 {
		return buf, err
	}
	return buf[:len(buf)-1], nil
}

func TestHostPoolDriverFailuresLeaveNoTrace(t *testing.T) {
	cases := []struct {
		name   string
		drv    func(*sim.Device) core.Driver
		code   cudaapi.Result
		phrase string
	}{
		{"out of memory", func(d *sim.Device) core.Driver {
			d.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
			return d
		}, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "HostAlloc of a 128-byte bucket for a 100-byte request failed"},
		{"null success", func(d *sim.Device) core.Driver {
			d.NullNth(sim.OpHostAlloc, 1)
			return d
		}, 0, "HostAlloc returned success with a null result"},
		{"wrong length", func(d *sim.Device) core.Driver { return shortHostAlloc{d} },
			0, "HostAlloc of 128 bytes returned 127 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDev()
			p := core.NewHostPool(c.drv(dev), 1<<20, nil)
			b, err := p.Get("Upload", 100)
			ce := requireErrKind(t, err, core.ErrDriver, "Upload", c.phrase)
			assert.Equal(t, c.code, ce.Code)
			assert.Nil(t, b.Buf())
			assert.Zero(t, p.CachedBytes())
			assert.Zero(t, p.AllocatedBytes())
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestHostPoolFreesPutsOfUnknownOrMalformedBlocks(t *testing.T) {
	dev := newDev()
	log, logs := newLog()
	p := core.NewHostPool(dev, 1<<20, log)

	buf, err := dev.HostAlloc(512)
	require.NoError(t, err)
	p.Put(core.MakePinnedBlock(buf)) // bucket 512 never missed here
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(1), dev.Calls(sim.OpHostFree))
	assert.Len(t, logs.errors(), 1, "the allocated count underflowed and was repaired")

	buf, err = dev.HostAlloc(300)
	require.NoError(t, err)
	p.Put(core.MakePinnedBlock(buf))
	assert.Equal(t, uint64(2), dev.Calls(sim.OpHostFree))
	assert.Zero(t, p.CachedBytes())

	p.Put(core.PinnedBlock{})
	assert.Equal(t, uint64(2), dev.Calls(sim.OpHostFree))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolRepairsUnderflowedAccountingToZeroAndLogs(t *testing.T) {
	dev := newDev()
	log, logs := newLog()
	p := core.NewHostPool(dev, 1<<20, log)
	a, err := p.Get("test", 64)
	require.NoError(t, err)
	p.Put(a)
	p.SetCachedBytes(1)
	_, err = p.Get("test", 64)
	require.NoError(t, err)
	assert.Zero(t, p.CachedBytes())
	require.Len(t, logs.errors(), 1)
	assert.Contains(t, logs.errors()[0], "pinned host pool cached bytes underflowed; repaired accounting to zero")
	p.Put(a)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolCloseFreesEverythingAndRefusesGets(t *testing.T) {
	dev := newDev()
	p := core.NewHostPool(dev, 1<<20, nil)
	a, err := p.Get("test", 64)
	require.NoError(t, err)
	b, err := p.Get("test", 4096)
	require.NoError(t, err)
	p.Put(a)
	dev.FailNth(sim.OpHostFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	requireErrKind(t, p.Close(), core.ErrDriver, "HostFree")
	assert.Zero(t, p.CachedBytes())
	assert.Equal(t, uint64(64+4096), p.AllocatedBytes(), "the block HostFree refused is still counted")

	_, err = p.Get("Late", 64)
	requireErrKind(t, err, core.ErrClosed, "Late", "pinned host pool is closed")
	p.Put(b)
	assert.Equal(t, uint64(64), p.AllocatedBytes())
	require.NoError(t, p.Close(), "closing again retries the refused free")
	assert.Zero(t, p.AllocatedBytes())
	requireNoLive(t, dev)
}

func TestHostPoolConcurrentGetPut(t *testing.T) {
	dev := newDev()
	p := core.NewHostPool(dev, 256<<10, nil)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := 1 + (g*7919+i*104729)%(16<<10)
				b, err := p.Get("test", n)
				if !assert.NoError(t, err) {
					return
				}
				b.Buf()[0], b.Buf()[n-1] = byte(g), byte(i) // the race detector sees shared blocks
				p.Put(b)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, p.CachedBytes(), uint64(256<<10))
	assert.Equal(t, p.CachedBytes(), p.AllocatedBytes())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestHostPoolHitAllocatesNothing(t *testing.T) {
	dev := newDev()
	p := core.NewHostPool(dev, 1<<20, nil)
	b, err := p.Get("test", 4096)
	require.NoError(t, err)
	p.Put(b)
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := p.Get("test", 4096)
		if err != nil {
			panic(err)
		}
		p.Put(b)
	})
	assert.Zero(t, allocs)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func BenchmarkHostPoolHit(b *testing.B) {
	dev := newDev()
	p := core.NewHostPool(dev, 1<<20, nil)
	blk, err := p.Get("bench", 4096)
	require.NoError(b, err)
	p.Put(blk)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		blk, err := p.Get("bench", 4096)
		if err != nil {
			b.Fatal(err)
		}
		p.Put(blk)
	}
	b.StopTimer()
	require.NoError(b, p.Close())
}
