package core_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// freeWatch is a simulated device that knows which HostAlloc blocks are
// live, so a test can tell whether memory was freed under a goroutine
// still using it. A block counts as freed from the start of its HostFree.
type freeWatch struct {
	*sim.Device
	mu   sync.Mutex
	live map[uintptr]uintptr // start -> end of each live HostAlloc block
	// big counts HostAllocs of at least bigBytes; the one numbered
	// failBig (from 1) fails, when set.
	bigBytes uint64
	big      atomic.Int64
	failBig  atomic.Int64
	// slowDtoH counts MemcpyDtoHAsync calls down: the one that takes it
	// to zero sleeps dtohSleep before queueing its copy.
	slowDtoH  atomic.Int64
	dtohSleep time.Duration
}

func (w *freeWatch) MemcpyDtoHAsync(dst []byte, src uint64, s core.Stream) error {
	if w.slowDtoH.Load() > 0 && w.slowDtoH.Add(-1) == 0 {
		time.Sleep(w.dtohSleep)
	}
	return w.Device.MemcpyDtoHAsync(dst, src, s)
}

func (w *freeWatch) HostAlloc(n uint64) ([]byte, error) {
	if w.bigBytes > 0 && n >= w.bigBytes && w.big.Add(1) == w.failBig.Load() {
		return nil, cudaapi.CUDA_ERROR_OUT_OF_MEMORY
	}
	b, err := w.Device.HostAlloc(n)
	if err == nil && len(b) > 0 {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		w.mu.Lock()
		w.live[start] = start + uintptr(len(b))
		w.mu.Unlock()
	}
	return b, err
}

func (w *freeWatch) HostFree(p unsafe.Pointer) error {
	w.mu.Lock()
	delete(w.live, uintptr(p))
	w.mu.Unlock()
	return w.Device.HostFree(p)
}

// holds reports whether b lies inside one live HostAlloc block.
func (w *freeWatch) holds(b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	w.mu.Lock()
	defer w.mu.Unlock()
	for s, e := range w.live {
		if lo >= s && hi <= e {
			return true
		}
	}
	return false
}

// evictRig is a Backend over a freeWatch holding n buffers of size bytes
// with known contents, and a hook that watches every part a background
// eviction evicts: it sleeps in the first part of each readback (so a
// Close, Trim or next call lands while the eviction runs) and checks the
// part's memory is still allocated before and after.
type evictRig struct {
	b       *core.Backend
	w       *freeWatch
	hs      []core.Buffer
	want    [][]byte
	evicted atomic.Int64 // bytes evicted
	parts   atomic.Int64
	bad     atomic.Int64 // parts that lay in freed memory
	slow    atomic.Bool  // the next part sleeps
	// hook is what the Backend's eviction hook calls: watch, or a gate.
	hook atomic.Pointer[func(part []byte)]
}

func newEvictRig(t *testing.T, plan xferplan.Tuning, n, size int, opts ...core.Option) *evictRig {
	t.Helper()
	r := &evictRig{w: &freeWatch{Device: sim.New(sim.Config{TotalMemory: 1 << 30}), live: map[uintptr]uintptr{},
		bigBytes: uint64(n * size)}} // a readback of all n buffers' staging, none of the uploads' own
	watch := func(part []byte) {
		if !r.w.holds(part) {
			r.bad.Add(1)
		}
		if r.slow.CompareAndSwap(true, false) {
			time.Sleep(3 * time.Millisecond)
		}
		if !r.w.holds(part) {
			r.bad.Add(1)
		}
		r.parts.Add(1)
		r.evicted.Add(int64(len(part)))
	}
	r.hook.Store(&watch)
	opts = append([]core.Option{core.WithLogger(quietLogger),
		core.WithEvictHookForTest(func(part []byte) { (*r.hook.Load())(part) }),
		core.WithPlanTuning(plan),
		core.WithStagingCache(core.StagingCache{Evict: core.EvictAlways})}, opts...)
	b, err := core.Open(r.w, opts...)
	require.NoError(t, err)
	r.b = b
	t.Cleanup(func() {
		_ = b.Close()
		sim.RequireNoLeaks(t, r.w.Device)
		assert.Zero(t, r.bad.Load(), "a background eviction touched freed staging")
	})
	for i := range n {
		h, err := b.Alloc(size)
		require.NoError(t, err)
		data := bytes.Repeat([]byte{byte(i*7 + 1)}, size)
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
		r.hs, r.want = append(r.hs, h), append(r.want, data)
	}
	return r
}

// read reads every buffer back, the first part of its eviction slow.
func (r *evictRig) read(t *testing.T, dst [][]byte) [][]byte {
	t.Helper()
	r.slow.Store(true)
	out, err := r.b.DownloadMany(allOf(r.hs), dst)
	require.NoError(t, err)
	for i := range r.want {
		require.True(t, bytes.Equal(r.want[i], out[i]), "buffer %d", i)
	}
	return out
}

// readFirst reads buffer 0 back into a new slice with Download
// (a staged single readback under the staged plans) and checks its bytes.
func (r *evictRig) readFirst(t *testing.T) {
	t.Helper()
	out, err := r.b.Download(r.hs[0].All(), nil)
	require.NoError(t, err)
	require.Equal(t, r.want[0], out)
}

// gatedEvictions holds every background eviction at gate, counting the
// bytes evicted and the parts that lay in freed memory.
type gatedEvictions struct {
	gate         chan struct{}
	evicted, bad atomic.Int64
}

// gateEvictions replaces the rig's eviction hook (for the rest of the
// test) with one that waits for the returned gate to close.
func (r *evictRig) gateEvictions(t *testing.T) *gatedEvictions {
	g := &gatedEvictions{gate: make(chan struct{})}
	gated := func(part []byte) {
		<-g.gate
		if !r.w.holds(part) {
			g.bad.Add(1)
		}
		g.evicted.Add(int64(len(part)))
	}
	prev := r.hook.Swap(&gated)
	t.Cleanup(func() { r.hook.Store(prev) })
	return g
}

// returnsFirst runs call, which must succeed and return while the gate
// still holds every eviction back.
func (g *gatedEvictions) returnsFirst(t *testing.T, call func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		close(g.gate)
		t.Fatal("the readback waited for the eviction of its staging")
	}
}

// rereadAllocs reads the rig's buffers once, then reads more times into
// the same slots right after one another, and returns how many staging
// blocks the first read allocated, how many each later one did, and how
// many spare blocks the background allocated after the last read
// returned.
func (r *evictRig) rereadAllocs(t *testing.T, reads int) (first uint64, later []uint64, after uint64) {
	start := r.w.Calls(sim.OpHostAlloc)
	dst := r.read(t, nil)
	first = r.w.Calls(sim.OpHostAlloc) - start
	for range reads {
		before := r.w.Calls(sim.OpHostAlloc)
		dst = r.read(t, dst)
		later = append(later, r.w.Calls(sim.OpHostAlloc)-before)
	}
	end := r.w.Calls(sim.OpHostAlloc)
	r.b.MemoryStats() // waits for the spares being allocated
	return first, later, r.w.Calls(sim.OpHostAlloc) - end
}

// sum adds up xs.
func sum(xs []uint64) (n uint64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// evictPlans are the readback plans the eviction tests run: packed in one
// DMA, packed in parts copied out as they land, per-copy.
var evictPlans = map[string]xferplan.Tuning{
	"packed":       {Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, PackParts: 1},
	"packed-parts": {Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, PackParts: 3},
	"per-copy":     {Only: xferplan.Kinds(xferplan.PerCopy), PackMinCopies: 2},
}

// TestReadbackEvictionHoldsStagingUntilDone: a readback returns before its
// staging is evicted, yet Close, Trim, the statistics and the next
// readback right after it all wait for the eviction: no eviction touches
// freed memory, Trim leaves nothing cached, the statistics count the
// block, and the next readback reuses the same block instead of
// allocating another. Every byte the device wrote is evicted once.
func TestReadbackEvictionHoldsStagingUntilDone(t *testing.T) {
	const n, size = 64, 16 << 10
	for name, plan := range evictPlans {
		if plan.PackParts > 1 {
			continue // its first readback evicts before returning (TestPackedPartsPinASecondSetThenEvictAfterReturning)
		}
		t.Run(name+"/close", func(t *testing.T) {
			r := newEvictRig(t, plan, n, size)
			r.read(t, nil)
			require.NoError(t, r.b.Close())
			assert.Equal(t, int64(n*size), r.evicted.Load(), "bytes evicted")
		})
		t.Run(name+"/trim", func(t *testing.T) {
			r := newEvictRig(t, plan, n, size)
			r.read(t, nil)
			require.NoError(t, r.b.Trim())
			pinned := r.b.MemoryStats().CachedPinned
			assert.Zero(t, pinned, "Trim left pinned staging cached")
			assert.Equal(t, int64(n*size), r.evicted.Load(), "bytes evicted")
		})
		t.Run(name+"/stats", func(t *testing.T) {
			r := newEvictRig(t, plan, n, size)
			r.read(t, nil)
			pinned := r.b.MemoryStats().CachedPinned
			assert.GreaterOrEqual(t, pinned, uint64(n*size), "the evicted staging is back in the cache")
		})
		t.Run(name+"/next-readback", func(t *testing.T) {
			// The first readbacks after another wait for its staging;
			// then the bucket may get a second set (whether it does
			// depends on the timing: TestHostPoolSpareSetForBackToBack-
			// Readbacks), never more, however many readbacks follow.
			r := newEvictRig(t, plan, n, size)
			first, later, after := r.rereadAllocs(t, 6)
			assert.Equal(t, []uint64{0, 0}, later[:2], "a readback allocated staging before its bucket had waited twice")
			assert.LessOrEqual(t, sum(later)+after, first, "back-to-back readbacks allocated more than one spare set")
			require.NoError(t, r.b.Close())
			assert.Equal(t, int64(7*n*size), r.evicted.Load(), "bytes evicted")
		})
	}
}

// TestPackedPartsPinASecondSetThenEvictAfterReturning: packed readbacks in
// parts evict in their copy-out until the second of two that follow one
// another pins a second data block before it returns; each one after that
// returns before any of its staging is evicted, the eviction covers
// exactly the bytes the device wrote, in memory that is still allocated,
// and Close waits for it. However many follow, nothing more is allocated.
func TestPackedPartsPinASecondSetThenEvictAfterReturning(t *testing.T) {
	const n, size = 64, 16 << 10
	r := newEvictRig(t, evictPlans["packed-parts"], n, size,
		core.WithSpareWindowForTest(time.Minute)) // however slow the machine
	dst := r.read(t, nil)
	assert.Equal(t, int64(1), r.w.big.Load(), "data blocks pinned by the first readback")
	dst = r.read(t, dst)
	assert.Equal(t, int64(2), r.w.big.Load(), "data blocks pinned by the second readback")
	assert.Zero(t, r.parts.Load(), "a readback with one block evicted after the call")
	g := r.gateEvictions(t)
	allocs := r.w.Calls(sim.OpHostAlloc)
	g.returnsFirst(t, func() (err error) {
		dst, err = r.b.DownloadMany(allOf(r.hs), dst)
		return err
	})
	for i := range r.want {
		require.True(t, bytes.Equal(r.want[i], dst[i]), "buffer %d", i)
	}
	assert.Zero(t, g.evicted.Load(), "evicted before the gate opened")
	close(g.gate)
	for range 4 {
		dst = r.read(t, dst)
	}
	assert.Zero(t, r.w.Calls(sim.OpHostAlloc)-allocs, "readbacks with two sets allocated staging")
	require.NoError(t, r.b.Close())
	assert.Equal(t, int64(5*n*size), g.evicted.Load(), "bytes evicted")
	assert.Zero(t, g.bad.Load(), "evicted freed memory")
}

// TestPackedPartsSpareFailureIsHarmless: when pinning the second data
// block fails, the readback still succeeds with its bytes, nothing leaks
// (the rig's cleanup checks), and the readbacks right after it evict in
// their copy-out without trying the pin again; once the retry delay has
// passed, the next one pins the block after all and the ones after it
// evict after the call.
func TestPackedPartsSpareFailureIsHarmless(t *testing.T) {
	const n, size = 64, 16 << 10
	const retry = 200 * time.Millisecond
	r := newEvictRig(t, evictPlans["packed-parts"], n, size, core.WithSpareWindowForTest(time.Minute), core.WithSpareRetryForTest(retry))
	r.w.failBig.Store(2) // the second readback's spare
	dst := r.read(t, nil)
	dst = r.read(t, dst)
	failedAt := time.Now()
	assert.Equal(t, int64(2), r.w.big.Load(), "data blocks tried")
	for range 3 {
		dst = r.read(t, dst)
	}
	if time.Since(failedAt) < retry {
		assert.Equal(t, int64(2), r.w.big.Load(), "data blocks tried within the retry delay")
	}
	time.Sleep(retry)
	dst = r.read(t, dst)
	assert.Equal(t, int64(3), r.w.big.Load(), "data blocks tried after the retry delay")
	assert.Zero(t, r.parts.Load(), "readbacks with one set evicted after the call")
	r.read(t, dst)
	require.NoError(t, r.b.Close())
	assert.Equal(t, int64(n*size), r.evicted.Load(), "bytes evicted after the call, by the readback with two sets")
}

// TestPackedPartsSpareRetriesAfterTrim: a failed spare pin holds off the
// next one only until a Trim (which frees pinned memory): back-to-back
// readbacks after it get their second block at once, long before the retry
// delay has passed, and evict after the call again.
func TestPackedPartsSpareRetriesAfterTrim(t *testing.T) {
	const n, size = 64, 16 << 10
	r := newEvictRig(t, evictPlans["packed-parts"], n, size, core.WithSpareWindowForTest(time.Minute), core.WithSpareRetryForTest(time.Hour))
	r.w.failBig.Store(2) // the second readback's spare
	dst := r.read(t, nil)
	dst = r.read(t, dst)
	dst = r.read(t, dst)
	assert.Equal(t, int64(2), r.w.big.Load(), "data blocks tried before the Trim")
	require.NoError(t, r.b.Trim())
	for range 3 {
		dst = r.read(t, dst)
	}
	require.NoError(t, r.b.Close())
	assert.Equal(t, int64(4), r.w.big.Load(), "data blocks pinned after the Trim: the readback's own and the spare")
	assert.Positive(t, r.evicted.Load(), "a readback with two sets evicted after the call")
}

// TestPackedPartsSpareStaysWithinTheCap: a second data block that would
// take the pool's pinned bytes past its cap is not pinned, and the
// readbacks keep evicting in their copy-out.
func TestPackedPartsSpareStaysWithinTheCap(t *testing.T) {
	const n, size = 64, 16 << 10
	r := newEvictRig(t, evictPlans["packed-parts"], n, size, core.WithPinnedPoolCap(3*n*size/2), core.WithSpareWindowForTest(time.Minute))
	dst := r.read(t, nil)
	for range 2 {
		dst = r.read(t, dst)
	}
	assert.Equal(t, int64(1), r.w.big.Load(), "data blocks pinned")
	require.NoError(t, r.b.Close())
	assert.Zero(t, r.parts.Load(), "readbacks with one set evicted after the call")
}

// TestPackedPartsSpareWindowRunsFromTheEnd: the spare window counts from
// the end of the last readback that found one block, so a first readback
// slower than the window (say, faulting in its destination) still lets the
// one right after it pin the second block.
func TestPackedPartsSpareWindowRunsFromTheEnd(t *testing.T) {
	const window = 50 * time.Millisecond
	r := newEvictRig(t, evictPlans["packed-parts"], 64, 16<<10, core.WithSpareWindowForTest(window))
	r.w.dtohSleep = 2 * window
	r.w.slowDtoH.Store(2) // the first readback's second part
	dst := r.read(t, nil)
	r.read(t, dst)
	assert.Equal(t, int64(2), r.w.big.Load(), "data blocks pinned")
}

// TestSporadicPackedPartsKeepOneBlock: readbacks in parts further apart
// than the spare window evict in their copy-out and never pin a second
// data block.
func TestSporadicPackedPartsKeepOneBlock(t *testing.T) {
	const window = time.Millisecond
	r := newEvictRig(t, evictPlans["packed-parts"], 64, 16<<10, core.WithSpareWindowForTest(window))
	var dst [][]byte
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * window)
		}
		dst = r.read(t, dst)
	}
	assert.Equal(t, int64(1), r.w.big.Load(), "data blocks pinned")
	require.NoError(t, r.b.Close())
	assert.Zero(t, r.parts.Load(), "parts evicted after a call")
}

// TestPackedPartsEvictInTheirCopyOutWhenAsked: with WithInlinePartsEviction
// a packed readback in parts evicts while it copies out, however closely
// readbacks follow one another, and never pins a second set.
func TestPackedPartsEvictInTheirCopyOutWhenAsked(t *testing.T) {
	r := newEvictRig(t, evictPlans["packed-parts"], 64, 16<<10, core.WithInlinePartsEviction())
	_, later, after := r.rereadAllocs(t, 3)
	assert.Zero(t, sum(later)+after, "a readback allocated staging")
	assert.Equal(t, int64(1), r.w.big.Load(), "data blocks pinned")
	require.NoError(t, r.b.Close())
	assert.Zero(t, r.parts.Load(), "parts evicted after a call")
	assert.Zero(t, r.bad.Load())
}

// TestReadbackEvictionOnlyWhenAsked: EvictNever evicts nothing.
func TestReadbackEvictionOnlyWhenAsked(t *testing.T) {
	r := newEvictRig(t, evictPlans["packed"], 64, 16<<10, core.WithStagingCache(core.StagingCache{Evict: core.EvictNever}))
	r.read(t, nil)
	require.NoError(t, r.b.Close())
	assert.Zero(t, r.parts.Load(), "parts evicted")
}

// TestReadbackFailsWhileEvicting: a readback that fails while the last
// one's staging is still being evicted leaves the caller's slots as they
// were and leaks nothing, whichever driver call fails.
func TestReadbackFailsWhileEvicting(t *testing.T) {
	for name, plan := range evictPlans {
		// A readback in parts learns from events, not a stream
		// synchronization, that its data landed.
		faults := []sim.Op{sim.OpMemcpyDtoHAsync, sim.OpStreamSynchronize, sim.OpHostAlloc}
		if plan.PackParts > 1 {
			faults = []sim.Op{sim.OpMemcpyDtoHAsync, sim.OpEventQuery, sim.OpEventRecord, sim.OpHostAlloc}
		}
		for _, op := range faults {
			t.Run(name+"/"+op.String(), func(t *testing.T) {
				r := newEvictRig(t, plan, 64, 16<<10)
				dst := r.read(t, nil)
				before := make([][]byte, len(dst))
				for i := range dst {
					before[i] = bytes.Clone(dst[i])
				}
				if op == sim.OpHostAlloc {
					// Only a readback that cannot have its block back
					// allocates: make the next one larger.
					h, err := r.b.Alloc(4 << 20)
					require.NoError(t, err)
					r.hs = append(r.hs, h)
				}
				r.w.FailNth(op, 1, cudaapi.CUDA_ERROR_UNKNOWN)
				r.slow.Store(true)
				out, err := r.b.DownloadMany(allOf(r.hs), dst)
				require.Error(t, err)
				require.Equal(t, len(dst), len(out))
				for i := range dst {
					require.True(t, bytes.Equal(before[i], out[i]), "slot %d changed", i)
				}
			})
		}
	}
}

// TestStagedReadbackEvictsAfterReturning: staged single readbacks that
// follow one another get a second set of staging, pinned by the second
// one before it returns, and from then on each
// copies its chunks out and returns before any of its staging is evicted;
// the eviction then covers exactly the bytes the device wrote, in memory
// that is still allocated, and Close waits for it.
func TestStagedReadbackEvictsAfterReturning(t *testing.T) {
	const size, chunk = 64 << 10, 16 << 10
	plan := stagedPlan(chunk)
	r := newEvictRig(t, plan, 1, size, core.WithSpareWindowForTest(time.Minute)) // however slow the machine
	allocs := r.w.Calls(sim.OpHostAlloc)
	for range 2 {
		r.readFirst(t)
	}
	r.b.MemoryStats() // waits for the second set
	assert.Equal(t, uint64(size/chunk), r.w.Calls(sim.OpHostAlloc)-allocs, "a second set of staging (the upload allocated the first)")
	assert.Zero(t, r.parts.Load(), "readbacks with one set evicted after the call")
	g := r.gateEvictions(t)
	dmas := r.w.Calls(sim.OpMemcpyDtoHAsync)
	var out []byte
	g.returnsFirst(t, func() (err error) {
		out, err = r.b.Download(r.hs[0].All(), nil)
		return err
	})
	assert.Equal(t, r.want[0], out)
	assert.Equal(t, uint64(size/chunk), r.w.Calls(sim.OpMemcpyDtoHAsync)-dmas, "the readback was not staged in chunks")
	assert.Zero(t, g.evicted.Load(), "evicted before the gate opened")
	close(g.gate)
	require.NoError(t, r.b.Close())
	assert.Equal(t, int64(size), g.evicted.Load(), "bytes evicted")
	assert.Zero(t, g.bad.Load(), "evicted freed memory")
}

// TestLargeStagedReadbackEvictsInItsCopyOut: a staged single readback
// past 2 MiB evicts each chunk as it
// copies it out, so nothing is left to evict after it returns.
func TestLargeStagedReadbackEvictsInItsCopyOut(t *testing.T) {
	const size, chunk = 3 << 20, 512 << 10
	plan := stagedPlan(chunk)
	r := newEvictRig(t, plan, 1, size, core.WithSpareWindowForTest(time.Minute))
	for range 2 { // a second set, were the size eligible
		r.readFirst(t)
	}
	r.b.MemoryStats()
	dmas := r.w.Calls(sim.OpMemcpyDtoHAsync)
	out, err := r.b.Download(r.hs[0].All(), nil)
	require.NoError(t, err)
	assert.Equal(t, r.want[0], out)
	assert.Equal(t, uint64(size/chunk), r.w.Calls(sim.OpMemcpyDtoHAsync)-dmas, "the readback was not staged in chunks")
	require.NoError(t, r.b.Close())
	assert.Zero(t, r.parts.Load(), "parts evicted after the call")
}

// TestSporadicStagedReadbacksKeepOneSet: staged readbacks further apart than the spare window evict in their copy
// out and never get a second set of staging.
func TestSporadicStagedReadbacksKeepOneSet(t *testing.T) {
	const size, chunk = 64 << 10, 16 << 10
	plan := stagedPlan(chunk)
	const window = time.Millisecond
	r := newEvictRig(t, plan, 1, size, core.WithSpareWindowForTest(window))
	allocs := r.w.Calls(sim.OpHostAlloc)
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * window)
		}
		r.readFirst(t)
	}
	r.b.MemoryStats()
	assert.Zero(t, r.w.Calls(sim.OpHostAlloc)-allocs, "a second set of staging (the upload allocated the first)")
	assert.Zero(t, r.parts.Load(), "parts evicted after a call")
}

// TestStagedReadbacksEvictInTheirCopyOutWhenAsked: with
// WithInlineStagedEviction staged single readbacks evict in their copy out
// however closely they follow one another, and never get a second set of
// staging.
func TestStagedReadbacksEvictInTheirCopyOutWhenAsked(t *testing.T) {
	const size, chunk = 64 << 10, 16 << 10
	plan := stagedPlan(chunk)
	r := newEvictRig(t, plan, 1, size, core.WithInlineStagedEviction(), core.WithSpareWindowForTest(time.Minute))
	allocs := r.w.Calls(sim.OpHostAlloc)
	for range 4 {
		r.readFirst(t)
	}
	r.b.MemoryStats()
	assert.Zero(t, r.w.Calls(sim.OpHostAlloc)-allocs, "a second set of staging")
	assert.Zero(t, r.parts.Load(), "parts evicted after a call")
}

// stagedPlan stages every single readback in chunks of chunk bytes on two
// goroutines.
func stagedPlan(chunk int) xferplan.Tuning {
	return xferplan.Tuning{Only: xferplan.Kinds(xferplan.Staged), StageMin: 1, MinChunk: int64(chunk),
		MaxChunk: int64(chunk), MaxWorkers: 2}
}
