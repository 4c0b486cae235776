package core

import (
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Every upload and readback call is planned by xferplan from its sizes and
// count: Direct (the caller's memory is pinned through this Backend),
// PerCopy (upload.go, readback.go), Packed (packed.go) or Staged
// (staged.go). The planner's cost model holds every threshold; this file
// holds the Backend's tuning of it and the Direct path.

// DefaultCopyHelperLinger is how long copy helper goroutines keep polling for
// the next copy job after a transfer call's copying ends, unless
// WithCopyHelperLinger says otherwise. It is longer than the driver work
// between the copies of back-to-back calls (a DMA, a launch and a fence,
// 0.1-0.3 ms on the reference H100 host), so a stream of calls finds its
// helpers awake: parking at once doubled the packing and unpacking of
// 1024 x 4 KiB batches there (81 to 168 us and 107 to 207 us).
const DefaultCopyHelperLinger = 500 * time.Microsecond

// WithCopyHelperLinger sets how long the goroutines that help copy host
// memory keep polling for more work after a transfer call's copying ends:
// longer keeps them awake for the next call, at the cost of one busy core
// per helper meanwhile. A call of many items (32 or more) also wakes its
// helpers as it starts, and they poll for its copying for up to 200 us.
// Zero or a negative duration parks them at once and wakes none ahead. An
// idle process burns nothing: parked helpers use no CPU and exit after
// 100 ms without work.
func WithCopyHelperLinger(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
			c.xfer.prewake = -1
		}
		c.xfer.linger, c.xfer.pipeLinger = d, d
	}
}

// WithPlanTuning bounds the transfer planner: the most copy goroutines per
// call, the sizes from which single copies are staged and many copies
// packed, the chunk sizes and staging blocks, or a set of plan kinds to
// prefer (see xferplan.Tuning). Zero fields keep their defaults. Most
// callers never need it; it exists for hosts unlike the reference one and
// for tests that run every plan at small sizes.
func WithPlanTuning(t xferplan.Tuning) Option {
	return func(c *config) { c.xfer.plan = t }
}

// WithAtomicReadbacks, when on, makes every readback land whole in the
// Backend's staging before any byte reaches the caller's memory, so a
// failed readback never leaves a byte of the caller's storage changed. By
// default large readbacks hand their bytes over as they land, overlapping
// the copy out with the transfer: a single read staged in chunks, a read
// straight into memory pinned through this Backend, and a packed read of
// many buffers in parts may leave part of the caller's storage holding the
// device's bytes when the device fails mid-transfer (see
// Download and DownloadMany).
func WithAtomicReadbacks(on bool) Option {
	return func(c *config) { c.xfer.atomicReads = on }
}

// WithPlanModel replaces the planner's cost model (xferplan.Reference, the
// reference H100 host's measurements) with constants measured on another
// machine.
func WithPlanModel(m xferplan.Model) Option {
	m.Copy = append([]xferplan.CopyRate(nil), m.Copy...) // the caller's slice may change later
	return func(c *config) { c.xfer.model = &m }
}

// transferTuning is the planner's bounds and model plus the execution
// settings of the packed and staged paths. Its zero value means the
// defaults; tests narrow it (export_transfer_test.go) so the simulated
// device runs every plan at small sizes.
type transferTuning struct {
	plan         xferplan.Tuning
	model        *xferplan.Model // nil: xferplan.Reference()
	packBlock    int             // threads per block of the scatter and gather launches
	packGrid     int             // most blocks of a scatter or gather launch
	fenceSpin    time.Duration   // StreamQuery polling before a packed call's fence; < 0: none
	linger       time.Duration   // helper polling after a call's copy job; < 0: none
	pipeLinger   time.Duration   // helper polling after a staged chunk's copy; < 0: none
	prewake      time.Duration   // helpers woken at a many-item call's start poll this long; < 0: none
	plainPack    bool            // test-only: pack uploads with copy, not non-temporal stores
	plainUnpack  bool            // test-only: unpack readbacks with copy, never non-temporal stores
	plainStage   bool            // staged and per-copy uploads copy with copy, not non-temporal stores (StagingCache)
	evict        ReadbackEvict   // when readbacks evict their staging (StagingCache)
	evictReads   bool            // this call's readback evicts its staging once copied out (evictsReadback)
	atomicReads  bool            // readbacks land whole before reaching caller memory (WithAtomicReadbacks)
	inlineEvict  bool            // test-only: evict readback staging in the unpack, not after the call
	tableDMA     bool            // test-only: packed readbacks DMA their table even where kernels read pinned host memory
	inlineStaged bool            // test-only: staged readbacks always evict in their copy out (staged.go)
	inlineParts  bool            // test-only: readbacks in parts always evict in their copy-out (packedread.go)
	syncEach     bool            // test-only: fence after every queued packed operation
}

// referenceModel is the planner's model unless a test sets another.
var referenceModel = xferplan.Reference()

// tuning returns the Backend's transfer tuning with defaults filled in.
func (b *Backend) tuning() transferTuning {
	t := b.cfg.xfer
	if t.model == nil {
		t.model = &referenceModel
	}
	if t.packBlock <= 0 {
		t.packBlock = packBlockThreads
	}
	if t.packGrid <= 0 {
		t.packGrid = packMaxGrid
	}
	if t.fenceSpin == 0 {
		t.fenceSpin = packFenceSpin
	}
	if t.linger == 0 {
		t.linger = DefaultCopyHelperLinger
	}
	if t.pipeLinger == 0 {
		t.pipeLinger = DefaultCopyHelperLinger
	}
	if t.prewake == 0 {
		t.prewake = defaultPrewake
	}
	t.plan.MaxWorkers = min(max(t.plan.MaxWorkers, 0), maxCopyWorkers)
	return t
}

// defaultPrewake is how long helpers woken at the start of a many-item
// call poll for its copy job before they park again. Waking parked
// helpers at the call's start rather than when its copying starts hid
// their wake-ups behind validation and planning: on the reference H100
// host the pack of a 1024 x 4 KiB upload took 99-107 us with it and
// 116-143 us without.
const defaultPrewake = 200 * time.Microsecond

// prewakeMinItems is the fewest items of a call that wakes helpers ahead:
// fewer are never packed (xferplan's default PackMinCopies).
const prewakeMinItems = 32

// prewakeFor wakes, before a call of n items validates them, the copy
// helpers its copying will want, when t says so. The call's bytes are not
// known yet: n times the first item's length (first) estimates them, and
// one goroutine per xferplan WorkerBytes of that (at most MaxWorkers, and
// GOMAXPROCS) is what the planner would use at most.
func (t *transferTuning) prewakeFor(n, first int) {
	if t.prewake <= 0 || n < prewakeMinItems || first <= 0 {
		return
	}
	def := xferplan.DefaultTuning(maxCopyWorkers)
	w, per := t.plan.MaxWorkers, t.plan.WorkerBytes
	if w <= 0 {
		w = def.MaxWorkers
	}
	if per <= 0 {
		per = def.WorkerBytes
	}
	est := int64(math.MaxInt64)
	if int64(n) <= math.MaxInt64/int64(first) {
		est = int64(n) * int64(first)
	}
	t.prewakeHelpers(int(min(int64(w), est/per)))
}

// prewakeHelpers wakes the helpers a copy job of w workers will want (w-1,
// at most GOMAXPROCS-1), when t says so.
func (t *transferTuning) prewakeHelpers(w int) {
	if t.prewake > 0 && w > 1 {
		copyHelpers.prewake(min(w, runtime.GOMAXPROCS(0))-1, t.prewake)
	}
}

// choose plans one call.
func (t *transferTuning) choose(r xferplan.Request) xferplan.Plan {
	p := choosePlan(r, t.plan, t.model, min(runtime.GOMAXPROCS(0), maxCopyWorkers))
	p.Workers = min(max(p.Workers, 1), maxCopyWorkers)
	return p
}

// packedBound is an upper bound on the packed block of n pieces of bytes in
// all (payload, alignment padding and table), or 0 when it would not fit an
// int; the exact size is newPackLayout's total. A piece takes at most two
// table entries beyond one per packEntryBytes of its bytes.
func packedBound(n int, bytes uint64) int64 {
	per := uint64(packAlign - 1 + 2*kernels.TableEntryBytes)
	if n < 0 || bytes > math.MaxInt64-packAlign {
		return 0
	}
	fixed := bytes + bytes/packEntryBytes*kernels.TableEntryBytes + packAlign
	if fixed > math.MaxInt64 || uint64(n) > (math.MaxInt64-fixed)/per {
		return 0
	}
	return int64(fixed + uint64(n)*per)
}

// pinnedHost returns the region pinned through this Backend that holds all
// of p, with one more pending use so it cannot be freed or unpinned until
// unpinnedHost, or nil when p is not pinned memory (or empty).
func (b *Backend) pinnedHost(p []byte) *hostmem.Region {
	return b.pinned.Use(uintptr(unsafe.Pointer(unsafe.SliceData(p))), len(p))
}

// uploadDirect moves data (inside reg, pinned) to device address dst with
// one DMA and one fence. If the stream cannot be drained after a failure,
// reg keeps its pending use: the DMA may still read it, so it must not be
// freed.
func (b *Backend) uploadDirect(op string, ents []*residentEntry, reg *hostmem.Region, dst uint64, data []byte, requested int) error {
	err := b.directCopy(op, ents, reg, "MemcpyHtoDAsync", func(s Stream) error {
		return b.drv.MemcpyHtoDAsync(dst, data, s)
	})
	if err != nil {
		return err
	}
	b.tel.H2DBytes.Add(uint64(len(data)))
	b.tel.UploadOps.Add(1)
	b.tel.Requested.Add(uint64(requested))
	return nil
}

// downloadDirect moves len(out) bytes from device address src into out
// (inside reg, pinned) with one DMA and one fence. After a failure out may
// hold some of the bytes; as with uploadDirect, reg keeps its pending use
// when the stream cannot be drained, and the DMA may then write out after
// the call returned, whenever a quarantine retry synchronizes the stream
// (nothing cheaper can stop a queued DMA). The pending use keeps reg from
// being freed or unpinned until then, and Close leaves it pinned if that
// never happens.
func (b *Backend) downloadDirect(op string, ents []*residentEntry, reg *hostmem.Region, out []byte, src uint64) error {
	err := b.directCopy(op, ents, reg, "MemcpyDtoHAsync", func(s Stream) error {
		return b.drv.MemcpyDtoHAsync(out, src, s)
	})
	if err != nil {
		return err
	}
	b.tel.D2HBytes.Add(uint64(len(out)))
	b.tel.ReadbackOps.Add(1)
	b.tel.Requested.Add(1)
	return nil
}

// directCopy queues one DMA (named call, for errors) on a leased stream and
// fences it, counting the fence and the copy. reg's pending use is dropped
// unless a failed stream could not be drained.
func (b *Backend) directCopy(op string, ents []*residentEntry, reg *hostmem.Region, call string, queue func(Stream) error) error {
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		b.pinned.Done(reg)
		return err
	}
	fail := func(call string, err error) error {
		// When the drain fails the quarantine takes over reg's pending use
		// and drops it once the stream synchronizes.
		if b.syncOrQuarantine(op, inUse{ents: ents, regs: []*hostmem.Region{reg}}, lease) {
			b.pinned.Done(reg)
		}
		return driverError(op, call, err)
	}
	if err := queue(lease.Stream); err != nil {
		return fail(call, err)
	}
	if err := b.drv.StreamSynchronize(lease.Stream); err != nil {
		return fail("StreamSynchronize", err)
	}
	b.launch.Return(lease, true)
	b.pinned.Done(reg)
	b.tel.SyncPoints.Add(1)
	b.tel.DeviceCopies.Add(1)
	return nil
}

// scratch is the per-call working memory of a batched transfer (the pinned
// entries and the copy list), reused across calls so a batch of n items
// allocates none of it in the steady state.
type scratch struct {
	ents []*residentEntry
	ups  []fusion.UploadCopy
	rds  []fusion.ReadbackCopy
	n    int // items handed out by getScratch: ents and ups hold references only below it
}

// reads returns n readback requests of scratch memory.
func (sc *scratch) reads(n int) []fusion.ReadbackCopy {
	if cap(sc.rds) < n {
		sc.rds = make([]fusion.ReadbackCopy, n)
	}
	return sc.rds[:n]
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns a scratch with room for n items.
func getScratch(n int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.ents) < n {
		sc.ents = make([]*residentEntry, n)
	}
	if cap(sc.ups) < n {
		sc.ups = make([]fusion.UploadCopy, 0, n)
	}
	sc.n = n
	return sc
}

// putScratch clears what sc references (entries and caller data: only the
// first n items were used, the rest was cleared before) and gives it back.
// Scratch larger than maxScratchItems is dropped rather than kept.
func putScratch(sc *scratch) {
	clear(sc.ents[:sc.n])
	clear(sc.ups[:sc.n])
	if cap(sc.ents) > maxScratchItems || cap(sc.ups) > maxScratchItems || cap(sc.rds) > maxScratchItems {
		return
	}
	sc.ups = sc.ups[:0]
	scratchPool.Put(sc)
}

// maxScratchItems bounds the scratch kept for reuse (about 256 KiB).
const maxScratchItems = 4096

// slicePool recycles slices of T for the calls' scratch.
type slicePool[T any] struct{ p sync.Pool }

// get returns a pooled slice of n elements (contents unspecified).
func (sp *slicePool[T]) get(n int) *[]T {
	v, _ := sp.p.Get().(*[]T)
	if v == nil {
		v = new([]T)
	}
	if cap(*v) < n {
		*v = make([]T, n)
	}
	*v = (*v)[:n]
	return v
}

// put clears v (it may reference caller memory) and gives it back unless
// it is larger than maxScratchItems.
func (sp *slicePool[T]) put(v *[]T) {
	clear(*v)
	if cap(*v) <= maxScratchItems {
		sp.p.Put(v)
	}
}

var intsPool slicePool[int]

// getInts returns a pooled slice of n ints (contents unspecified).
func getInts(n int) *[]int { return intsPool.get(n) }

// putInts gives p back unless it is larger than maxScratchItems.
func putInts(p *[]int) { intsPool.put(p) }
