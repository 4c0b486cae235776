package alloc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassSizeWasteBound(t *testing.T) {
	prev := uint64(0)
	check := func(n uint64) {
		s := ClassSize(n)
		idx, size := classOf(n)
		idx2, size2 := classOf(s)
		switch {
		case s < n || (n <= exactClasses && s != n):
			t.Fatalf("ClassSize(%d) = %d", n, s)
		case 8*(s-n) >= max(n, 8):
			t.Fatalf("n=%d rounds to %d: 1/8 or more wasted", n, s)
		case size != s || classSize(idx) != s || idx >= numClasses:
			t.Fatalf("n=%d: class %d of %d bytes, classSize %d", n, idx, size, classSize(idx))
		case idx2 != idx || size2 != s:
			t.Fatalf("a class size %d is not its own class (%d vs %d)", s, idx2, idx)
		case s < prev:
			t.Fatalf("class sizes shrink: n=%d gives %d after %d", n, s, prev)
		}
		prev = s
	}
	for n := uint64(1); n <= 1<<16; n++ {
		check(n)
	}
	for k := 17; k <= 62; k++ {
		base := uint64(1) << k
		for _, d := range []uint64{base/2 + 1, base - base/8, base - 1, base} {
			check(d)
		}
	}
	require.Zero(t, ClassSize(0))
	require.Zero(t, ClassSize(MaxClassSize+1))
	require.Equal(t, MaxClassSize, ClassSize(MaxClassSize))
	// Classes are distinct and increasing.
	for i := 1; i < numClasses; i++ {
		require.Greater(t, classSize(i), classSize(i-1))
	}
}

func TestHitMakesNoDeviceCall(t *testing.T) {
	d := newFake(1 << 30)
	c := New(d, Config{Budget: 1 << 29, MaxCached: 1 << 28, IsOutOfMemory: isOOM})
	b, err := c.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, c.Free(b))
	calls := d.allocs + d.frees + d.freeReads
	for range 100 {
		b2, err := c.Alloc(4000) // same class as 4096
		require.NoError(t, err)
		require.Equal(t, b.Ptr, b2.Ptr)
		require.NoError(t, c.Free(b2))
	}
	require.Equal(t, calls, d.allocs+d.frees+d.freeReads, "a cache hit or a cached free called the device")
	st := c.Stats()
	require.Equal(t, uint64(100), st.Hits)
	require.Equal(t, uint64(1), st.Misses)
	require.Equal(t, uint64(1), st.FreeMemoryReads)
	allocs := testing.AllocsPerRun(100, func() {
		b, _ := c.Alloc(4096)
		_ = c.Free(b)
	})
	require.Zero(t, allocs)
}

// The scenario of a 1 MiB device: a freed 800,000-byte buffer must not
// keep a 200,000-byte one out, and a second 800,000-byte one is a hit.
func TestFreedMemoryServesLaterRequests(t *testing.T) {
	d := newFake(1 << 20)
	c := New(d, Config{Budget: nineTenths(1 << 20), MaxCached: 1 << 20, IsOutOfMemory: isOOM})
	b, err := c.Alloc(800000)
	require.NoError(t, err)
	require.NoError(t, c.Free(b))
	b2, err := c.Alloc(800000)
	require.NoError(t, err, "a cache hit must be served")
	require.Equal(t, b.Ptr, b2.Ptr)
	require.NoError(t, c.Free(b2))
	small, err := c.Alloc(200000)
	require.NoError(t, err, "cached bytes must be given back for a request that fits")
	st := c.Stats()
	require.Equal(t, uint64(1), st.Retries)
	require.Equal(t, b.Size, st.Released)
	require.Zero(t, st.Cached)
	require.Equal(t, small.Size, st.Reserved)
	require.Equal(t, d.used, st.Reserved)
	require.NoError(t, c.Free(small))
}

func TestReleaseWhatSufficesThenAll(t *testing.T) {
	d := newFake(1 << 30)
	const budget = 10000
	c := New(d, Config{Budget: budget, MaxCached: budget, IsOutOfMemory: isOOM})
	var bs []Block
	for _, n := range []uint64{1000, 2000, 3000} {
		b, err := c.Alloc(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, c.Free(b))
	}
	// 6144 cached; a 4500-byte request (class 4608) is short by 752: the
	// smallest cached block of at least 752 bytes (1024) is enough.
	b, err := c.Alloc(4500)
	require.NoError(t, err)
	st := c.Stats()
	require.Equal(t, uint64(1024), st.Released)
	require.Equal(t, uint64(2048+3072), st.Cached)
	require.Equal(t, uint64(1), st.Retries)
	require.LessOrEqual(t, st.Reserved, uint64(budget))
	require.NoError(t, c.Free(b))
	// Now 9728 cached: 9000 (class 9216) needs nearly everything.
	b, err = c.Alloc(9000)
	require.NoError(t, err)
	require.Zero(t, c.Stats().Cached)
	require.NoError(t, c.Free(b))
	require.Equal(t, d.used, c.Stats().Reserved)
}

func TestShortErrorSaysTheBytes(t *testing.T) {
	d := newFake(1 << 30)
	c := New(d, Config{Budget: 10000, MaxCached: 10000, IsOutOfMemory: isOOM})
	live, err := c.Alloc(6000) // class 6144
	require.NoError(t, err)
	cached, err := c.Alloc(1000) // class 1024
	require.NoError(t, err)
	require.NoError(t, c.Free(cached))
	_, err = c.Alloc(5000)
	var se *ShortError
	require.ErrorAs(t, err, &se)
	require.Equal(t, uint64(5000), se.Requested)
	require.Equal(t, uint64(1024), se.Cached)
	require.Equal(t, uint64(1024), se.Released)
	require.Equal(t, LimitBudget, se.Limit)
	require.Equal(t, uint64(6144+5120-10000), se.Missing, "the exact size cannot help: not tried")
	require.Contains(t, err.Error(), "1024 cached, 1024 released, 1264 still missing")
	st := c.Stats()
	require.Equal(t, uint64(1), st.OOMs)
	require.Equal(t, uint64(6144), st.Reserved, "a refused request holds nothing")
	require.NoError(t, c.Free(live))
}

func TestExactBlockWhenTheClassDoesNotFit(t *testing.T) {
	d := newFake(1 << 20)
	budget := nineTenths(1 << 20)
	c := New(d, Config{Budget: budget, MaxCached: 1 << 20, IsOutOfMemory: isOOM})
	b, err := c.Alloc(budget)
	require.NoError(t, err, "a request of the whole budget must succeed on an empty cache")
	require.Equal(t, budget, b.Size)
	require.False(t, b.Cached())
	require.NoError(t, c.Free(b))
	require.Zero(t, c.Stats().Reserved, "an exact block is not cached")
	require.Zero(t, d.used)
}

func TestLargeRequestsAreExactAndUncached(t *testing.T) {
	d := newFake(1 << 30)
	c := New(d, Config{Budget: 1 << 29, MaxCached: 1 << 28, MaxClassed: 1 << 20})
	b, err := c.Alloc(1<<20 + 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<20+1), b.Size)
	require.NoError(t, c.Free(b))
	require.Zero(t, c.Stats().Cached)
	b, err = c.Alloc(1 << 20)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<20), b.Size)
	require.NoError(t, c.Free(b))
	require.Equal(t, uint64(1<<20), c.Stats().Cached)
}

func TestFreeMemoryLimitsMisses(t *testing.T) {
	d := newFake(1 << 20)
	d.hidden = 1 << 19 // another user holds half the device
	c := New(d, Config{Budget: nineTenths(1 << 20), MaxCached: 1 << 20, IsOutOfMemory: isOOM})
	_, err := c.Alloc(600000)
	var se *ShortError
	require.ErrorAs(t, err, &se)
	require.Equal(t, LimitFreeMemory, se.Limit)
	require.Equal(t, uint64(1<<19), se.FreeMemory)
	require.Zero(t, d.allocs, "a request over 9/10 of free memory must not reach the device")
	b, err := c.Alloc(400000)
	require.NoError(t, err)
	require.NoError(t, c.Free(b))
}

// noReader hides the fake's FreeMemory, so only Alloc's out-of-memory
// failure tells the Cache the device is full.
type noReader struct{ d *fakeDevice }

func (n noReader) Alloc(x uint64) (uint64, error) { return n.d.Alloc(x) }
func (n noReader) Free(p uint64) error            { return n.d.Free(p) }

func TestDeviceOutOfMemoryReleasesAndRetries(t *testing.T) {
	d := newFake(1 << 20)
	c := New(noReader{d}, Config{Budget: 1 << 20, MaxCached: 1 << 20, IsOutOfMemory: isOOM})
	b, err := c.Alloc(700000)
	require.NoError(t, err)
	require.NoError(t, c.Free(b))
	d.hidden = 200000
	b, err = c.Alloc(500000)
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Stats().Retries)
	require.NoError(t, c.Free(b))
	require.NoError(t, c.Trim())
	d.hidden = 1 << 20
	_, err = c.Alloc(10)
	var se *ShortError
	require.ErrorAs(t, err, &se)
	require.Equal(t, LimitDevice, se.Limit)
	require.ErrorIs(t, err, errOOM)
}

func TestDeviceFailures(t *testing.T) {
	d := newFake(1 << 20)
	c := New(d, Config{Budget: 1 << 19, MaxCached: 1 << 19, IsOutOfMemory: isOOM})
	d.failAlloc = true
	_, err := c.Alloc(100)
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "Alloc", de.Call)
	require.ErrorIs(t, err, errFail)
	d.failRead = true
	_, err = c.Alloc(100)
	require.ErrorAs(t, err, &de)
	require.Equal(t, "FreeMemory", de.Call)
	require.Zero(t, c.Stats().Reserved)

	// A failed free keeps the block live; a retry frees it.
	c2 := New(d, Config{Budget: 1 << 19, MaxCached: 0})
	b, err := c2.Alloc(100)
	require.NoError(t, err)
	d.failFree = true
	require.ErrorIs(t, c2.Free(b), errFail)
	require.Equal(t, b.Size, c2.Stats().Live)
	d.failFree = false
	require.NoError(t, c2.Free(b))
	require.Zero(t, c2.Stats().Reserved)

	// A failed Trim keeps the block cached.
	b, err = c.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, c.Free(b))
	d.failFree = true
	require.ErrorIs(t, c.Trim(), errFail)
	require.Equal(t, b.Size, c.Stats().Cached)
	d.failFree = false
	require.NoError(t, c.Trim())
	require.Zero(t, c.Stats().Cached)
	require.Zero(t, d.used)
}

func TestBadBlocksAndClose(t *testing.T) {
	d := newFake(1 << 20)
	c := New(d, Config{Budget: 1 << 19, MaxCached: 1 << 19})
	_, err := c.Alloc(0)
	require.ErrorIs(t, err, ErrZeroSize)
	require.ErrorIs(t, c.Free(Block{}), ErrBadBlock)
	require.ErrorIs(t, c.Free(Block{Ptr: 1, Size: 100, class: 3}), ErrBadBlock)
	require.ErrorIs(t, c.Free(Block{Ptr: 1, Size: 100, class: -1}), ErrBadBlock, "nothing is live")
	b, err := c.Alloc(100)
	require.NoError(t, err)
	cached, err := c.Alloc(5000)
	require.NoError(t, err)
	require.NoError(t, c.Free(cached))
	require.NoError(t, c.Close())
	require.Zero(t, c.Stats().Cached)
	_, err = c.Alloc(100)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, c.Free(b), "a block freed after Close goes to the device")
	require.Zero(t, d.used)
	require.True(t, errors.Is(c.Close(), nil))
}

func TestPeaksAndReset(t *testing.T) {
	d := newFake(1 << 20)
	c := New(d, Config{Budget: 1 << 19, MaxCached: 1 << 19})
	a, _ := c.Alloc(1000)
	b, _ := c.Alloc(2000)
	require.NoError(t, c.Free(a))
	st := c.Stats()
	require.Equal(t, uint64(1024+2048), st.PeakLive)
	require.Equal(t, uint64(1024+2048), st.PeakReserved)
	c.ResetPeaks()
	st = c.Stats()
	require.Equal(t, uint64(2048), st.PeakLive)
	require.Equal(t, uint64(1024+2048), st.PeakReserved)
	require.NoError(t, c.Free(b))
	require.NoError(t, c.Trim())
	c.ResetPeaks()
	require.Zero(t, c.Stats().PeakReserved)
}

func TestCacheHooksSeeBlocksEnterAndLeave(t *testing.T) {
	d := newFake(1 << 20)
	var cached, reused []uint64
	c := New(d, Config{Budget: 1 << 19, MaxCached: 1 << 19,
		OnCached: func(p, n uint64) { cached = append(cached, p, n) },
		OnReused: func(p, n uint64) { reused = append(reused, p, n) }})
	b, err := c.Alloc(1000)
	require.NoError(t, err)
	require.Empty(t, reused, "a new block is not a reuse")
	require.NoError(t, c.Free(b))
	require.Equal(t, []uint64{b.Ptr, 1024}, cached)
	b2, err := c.Alloc(1000)
	require.NoError(t, err)
	require.Equal(t, []uint64{b.Ptr, 1024}, reused)
	require.NoError(t, c.Free(b2))
	require.NoError(t, c.Trim())
	require.Len(t, cached, 4)
	require.Len(t, reused, 2, "a block given back to the device is not a reuse")
}

// TestFreedBlockThatExactlyFillsTheCapIsCached: the cap bounds the cached
// bytes inclusively, so a block that fills it to the byte is cached (no
// device free), and one byte less of cap sends the same block back to the
// device. Both sides of the edge, with the cache empty and with a block
// already in it.
func TestFreedBlockThatExactlyFillsTheCapIsCached(t *testing.T) {
	const n = 4096
	size := ClassSize(n)
	for _, already := range []uint64{0, 1} {
		for _, slack := range []uint64{0, 1} {
			d := newFake(1 << 30)
			capBytes := (already+1)*size - slack
			c := New(d, Config{Budget: 1 << 29, MaxCached: capBytes, IsOutOfMemory: isOOM})
			var first Block
			if already > 0 {
				var err error
				first, err = c.Alloc(n)
				require.NoError(t, err)
			}
			b, err := c.Alloc(n)
			require.NoError(t, err)
			if already > 0 {
				require.NoError(t, c.Free(first))
			}
			frees := d.frees
			require.NoError(t, c.Free(b))
			st := c.Stats()
			if slack == 0 {
				require.Equal(t, frees, d.frees, "cap %d: a block that exactly fills it went to the device", capBytes)
				require.Equal(t, capBytes, st.Cached)
			} else {
				require.Equal(t, frees+1, d.frees, "cap %d: a block past it must go to the device", capBytes)
				require.Equal(t, already*size, st.Cached)
			}
			require.LessOrEqual(t, st.Cached, capBytes)
		}
	}
}

// OnRetry hears each Alloc that released cached blocks, with the bytes
// released, whether the retry then succeeds or fails; a hit or a miss that
// fits is not a retry.
func TestOnRetryHearsEachRetry(t *testing.T) {
	d := newFake(1 << 30)
	type heard struct{ requested, released uint64 }
	var got []heard
	c := New(d, Config{Budget: 10000, MaxCached: 10000, IsOutOfMemory: isOOM,
		OnRetry: func(req, rel uint64) { got = append(got, heard{req, rel}) }})
	a, err := c.Alloc(3000)
	require.NoError(t, err)
	require.NoError(t, c.Free(a))
	a, err = c.Alloc(3000) // a hit
	require.NoError(t, err)
	require.NoError(t, c.Free(a))
	require.Empty(t, got)
	b, err := c.Alloc(8000) // 3072 cached, 8192 needed: release it and retry
	require.NoError(t, err)
	require.Equal(t, []heard{{8000, 3072}}, got)
	require.NoError(t, c.Free(b))
	_, err = c.Alloc(20000) // over the budget even with the cache released
	require.Error(t, err)
	require.Equal(t, []heard{{8000, 3072}, {20000, 8192}}, got)
	require.Equal(t, uint64(2), c.Stats().Retries)
}
