package transfer

import (
	"math"
	"runtime"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Every upload and readback call is planned by xferplan from its sizes and
// count: Direct (the caller's memory is pinned through the Backend),
// PerCopy, Packed or Staged. The planner's cost model holds every
// threshold; Tuning holds the Backend's bounds on it and the execution
// settings of the paths.

// Tuning is the planner's bounds and model plus the execution settings of
// the packed and staged paths. Its zero value means the defaults
// (WithDefaults fills them in); tests narrow it so the simulated device
// runs every plan at small sizes.
type Tuning struct {
	Plan         xferplan.Tuning
	Model        *xferplan.Model // nil: xferplan.Reference()
	PackBlock    int             // threads per block of the scatter and gather launches
	PackGrid     int             // most blocks of a scatter or gather launch
	FenceSpin    time.Duration   // StreamQuery polling before a packed call's fence; < 0: none
	Linger       time.Duration   // helper polling after a call's copy job; < 0: none
	PipeLinger   time.Duration   // helper polling after a staged chunk's copy; < 0: none
	Prewake      time.Duration   // helpers woken at a many-item call's start poll this long; < 0: none
	PlainPack    bool            // test-only: pack uploads with copy, not non-temporal stores
	PlainUnpack  bool            // test-only: unpack readbacks with copy, never non-temporal stores
	PlainStage   bool            // staged and per-copy uploads copy with copy, not non-temporal stores
	Evict        EvictPolicy     // when readbacks evict their staging
	EvictReads   bool            // this call's readback evicts its staging once copied out (EvictsReadback)
	AtomicReads  bool            // readbacks land whole before reaching caller memory
	InlineEvict  bool            // test-only: evict readback staging in the unpack, not after the call
	TableDMA     bool            // test-only: packed readbacks DMA their table even where kernels read pinned host memory
	InlineStaged bool            // test-only: staged readbacks always evict in their copy out
	InlineParts  bool            // test-only: readbacks in parts always evict in their copy-out
	SyncEach     bool            // test-only: fence after every queued packed operation
	NoPageable   bool            // small uploads never use the driver's pageable copy (PageableMax)
	// KernelReadMin and KernelReadMax bound the direct reads into pinned
	// memory that a copy kernel writes when they follow the batch's
	// kernels (kernelread.go); 0: the defaults; KernelReadMax < 0: none.
	KernelReadMin, KernelReadMax int
	Procs                        int // goroutines the planner assumes run in parallel; <= 0: runtime.GOMAXPROCS
}

// referenceModel is the planner's model unless the tuning names another.
var referenceModel = xferplan.Reference()

// defaultPrewake is how long helpers woken at the start of a many-item
// call poll for its copy job before they park again. Waking parked
// helpers at the call's start rather than when its copying starts hid
// their wake-ups behind validation and planning: on the reference H100
// host the pack of a 1024 x 4 KiB upload took 99-107 us with it and
// 116-143 us without.
const defaultPrewake = 200 * time.Microsecond

// PrewakeMinItems is the fewest items of a call that wakes helpers ahead:
// fewer are never packed (xferplan's default PackMinCopies).
const PrewakeMinItems = 32

// WithDefaults returns t with its zero fields set to their defaults and
// the planner's worker bound clipped to what a copy job can use.
func (t Tuning) WithDefaults() Tuning {
	if t.Model == nil {
		t.Model = &referenceModel
	}
	if t.PackBlock <= 0 {
		t.PackBlock = PackBlockThreads
	}
	if t.PackGrid <= 0 {
		t.PackGrid = packMaxGrid
	}
	if t.FenceSpin == 0 {
		t.FenceSpin = packFenceSpin
	}
	if t.Linger == 0 {
		t.Linger = copyjob.DefaultLinger
	}
	if t.PipeLinger == 0 {
		t.PipeLinger = copyjob.DefaultLinger
	}
	if t.Prewake == 0 {
		t.Prewake = defaultPrewake
	}
	if t.KernelReadMin <= 0 {
		t.KernelReadMin = defaultKernelReadMin
	}
	if t.KernelReadMax == 0 {
		t.KernelReadMax = defaultKernelReadMax
	}
	t.Plan.MaxWorkers = min(max(t.Plan.MaxWorkers, 0), copyjob.MaxWorkers)
	return t
}

// PrewakeFor wakes, before a call of n items validates them, the copy
// helpers its copying will want, when t says so. The call's bytes are not
// known yet: n times the first item's length (first) estimates them, and
// one goroutine per xferplan WorkerBytes of that (at most MaxWorkers, and
// GOMAXPROCS) is what the planner would use at most.
func (t *Tuning) PrewakeFor(n, first int) {
	if t.Prewake <= 0 || n < PrewakeMinItems || first <= 0 {
		return
	}
	def := xferplan.DefaultTuning(copyjob.MaxWorkers)
	w, per := t.Plan.MaxWorkers, t.Plan.WorkerBytes
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
	t.PrewakeHelpers(int(min(int64(w), est/per)))
}

// PrewakeHelpers wakes the helpers a copy job of w workers will want (w-1,
// at most GOMAXPROCS-1), when t says so.
func (t *Tuning) PrewakeHelpers(w int) {
	if t.Prewake > 0 && w > 1 {
		copyjob.Prewake(min(w, runtime.GOMAXPROCS(0))-1, t.Prewake)
	}
}

// Choose plans one call.
func (t *Tuning) Choose(r xferplan.Request) xferplan.Plan {
	p := choosePlan(r, t.Plan, t.Model, t.procs())
	p.Workers = min(max(p.Workers, 1), copyjob.MaxWorkers)
	return p
}

// procs is the goroutines the planner assumes run in parallel: t.Procs,
// else GOMAXPROCS, at most copyjob.MaxWorkers.
func (t *Tuning) procs() int {
	procs := t.Procs
	if procs <= 0 {
		procs = runtime.GOMAXPROCS(0)
	}
	return min(procs, copyjob.MaxWorkers)
}

// CopyWorkers returns the goroutines that copy n bytes of host memory
// fastest under t's model and bounds.
func (t *Tuning) CopyWorkers(n uint64) int {
	m := t.Model
	if m == nil {
		m = &referenceModel
	}
	w := xferplan.CopyWorkers(int64(min(n, math.MaxInt64)), t.Plan, m, t.procs())
	return min(max(w, 1), copyjob.MaxWorkers)
}

// PackedBound is an upper bound on the packed block of n pieces of bytes in
// all (payload, alignment padding and table), or 0 when it would not fit an
// int; the exact size is NewLayout's Total. A piece takes at most two
// table entries beyond one per packEntryBytes of its bytes.
func PackedBound(n int, bytes uint64) int64 {
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
