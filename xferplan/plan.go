package xferplan

import (
	"fmt"
	"math"
	"time"
)

// Direction says which way a transfer moves.
type Direction uint8

// Directions.
const (
	Upload   Direction = iota // host to device
	Readback                  // device to host
)

// Kind is how a plan moves the bytes (see the package documentation).
type Kind uint8

// Plan kinds.
const (
	PerCopy Kind = iota
	Packed
	Staged
	Direct
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case PerCopy:
		return "per-copy"
	case Packed:
		return "packed"
	case Staged:
		return "staged"
	case Direct:
		return "direct"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// KindSet is a set of plan kinds.
type KindSet uint8

// Kinds returns the set holding ks.
func Kinds(ks ...Kind) KindSet {
	var s KindSet
	for _, k := range ks {
		if k <= Direct {
			s |= 1 << k
		}
	}
	return s
}

// Has reports whether s holds k.
func (s KindSet) Has(k Kind) bool { return k <= Direct && s&(1<<k) != 0 }

// Request describes one transfer call after fusion.
type Request struct {
	Dir Direction
	// Copies is the number of device copies after fusion.
	Copies int
	// Bytes is the payload: the sum of the copies' lengths.
	Bytes int64
	// PackedBytes is the size of the packed block the copies would need
	// (payload, alignment padding and table); 0 when packing is impossible.
	PackedBytes int64
	// Pinned says the host side of a single copy is page-locked memory the
	// device can reach directly.
	Pinned bool
	// Streamable says a single copy's host side is one contiguous slice
	// the call may fill or drain chunk by chunk (a Staged plan).
	Streamable bool
	// Drainable says a readback of many copies may hand each copy's bytes
	// to the caller as soon as the DMA carrying them has landed, so a
	// packed readback may move in several parts whose unpacking overlaps
	// the DMAs of later ones.
	Drainable bool
}

// Tuning bounds the plans Choose may return. Zero fields take DefaultTuning's
// values; a negative PackMinCopies or StageMin rules that kind out.
type Tuning struct {
	// MaxWorkers is the most goroutines that copy host memory for one call
	// (the caller's own among them).
	MaxWorkers int
	// WorkerBytes is the least host copying worth one more goroutine.
	WorkerBytes int64
	// StageMin is the smallest single copy that may be staged in chunks.
	StageMin int64
	// MinChunk and MaxChunk bound a staged chunk (and a packed part).
	MinChunk, MaxChunk int64
	// MaxChunks bounds the chunks of one staged transfer and the parts of
	// one packed transfer.
	MaxChunks int
	// Blocks is the most pinned staging blocks a staged transfer rotates.
	Blocks int
	// MaxStaging bounds the pinned staging of one staged transfer: up to
	// it, every chunk has a block of its own; beyond it, blocks are reused.
	MaxStaging int64
	// PackMinCopies is the fewest device copies that may be packed.
	PackMinCopies int
	// PackMaxMean is the largest mean copy that may be packed: the kernels
	// move one piece per thread block, so a few large pieces would keep few
	// multiprocessors busy.
	PackMaxMean int64
	// PackMaxBytes bounds the packed block, which is also a device staging
	// allocation.
	PackMaxBytes int64
	// PackParts, when positive, fixes the DMAs of a packed upload or of a
	// drainable packed readback (at most one per copy) instead of letting
	// the model choose. Other packed readbacks always move in one DMA.
	PackParts int
	// Only, when not empty, restricts the plans to these kinds whenever
	// one of them applies; PerCopy is the fallback when none does. Tests
	// use it to run one kind at sizes where the model would pick another.
	Only KindSet
}

// Default tuning values, for a host with maxProcs usable cores.
const (
	defaultWorkerBytes   = 32 << 10
	defaultStageMin      = 256 << 10
	defaultMinChunk      = 64 << 10
	defaultMaxChunk      = 32 << 20
	defaultMaxChunks     = 64
	defaultBlocks        = 64
	defaultMaxStaging    = 64 << 20
	defaultPackMinCopies = 32
	defaultPackMaxMean   = 64 << 10
	defaultPackMaxBytes  = 64 << 20
	maxWorkersCap        = 16
)

// DefaultTuning returns the default bounds for a host running maxProcs
// goroutines in parallel (runtime.GOMAXPROCS): at most that many copy
// workers, and never more than 16, past which host memory bandwidth is
// saturated on the reference machine.
func DefaultTuning(maxProcs int) Tuning {
	return Tuning{
		MaxWorkers: min(max(maxProcs, 1), maxWorkersCap), WorkerBytes: defaultWorkerBytes,
		StageMin: defaultStageMin, MinChunk: defaultMinChunk, MaxChunk: defaultMaxChunk,
		MaxChunks: defaultMaxChunks, Blocks: defaultBlocks, MaxStaging: defaultMaxStaging,
		PackMinCopies: defaultPackMinCopies, PackMaxMean: defaultPackMaxMean, PackMaxBytes: defaultPackMaxBytes,
	}
}

// withDefaults fills zero fields from DefaultTuning(maxProcs) and clamps the
// rest into sense.
func (t Tuning) withDefaults(maxProcs int) Tuning {
	d := DefaultTuning(maxProcs)
	fill := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	if t.MaxWorkers <= 0 {
		t.MaxWorkers = d.MaxWorkers
	}
	if t.MaxChunks <= 0 {
		t.MaxChunks = d.MaxChunks
	}
	if t.Blocks <= 0 {
		t.Blocks = d.Blocks
	}
	if t.PackMinCopies == 0 {
		t.PackMinCopies = d.PackMinCopies
	}
	if t.StageMin == 0 {
		t.StageMin = d.StageMin
	}
	fill(&t.WorkerBytes, d.WorkerBytes)
	fill(&t.MinChunk, d.MinChunk)
	fill(&t.MaxChunk, d.MaxChunk)
	fill(&t.PackMaxMean, d.PackMaxMean)
	fill(&t.PackMaxBytes, d.PackMaxBytes)
	fill(&t.MaxStaging, d.MaxStaging)
	t.MaxChunk = max(t.MaxChunk, t.MinChunk)
	return t
}

// Plan is how one transfer call moves its bytes.
type Plan struct {
	Kind Kind
	// Workers is how many goroutines (the caller's among them) copy host
	// memory: for the whole staging copy (PerCopy), each part (Packed) or
	// each chunk (Staged). Direct plans copy nothing; Workers is 1.
	Workers int
	// Chunk and Chunks split a Staged transfer: Chunks pieces of Chunk
	// bytes, the last one shorter when Bytes is not a multiple.
	Chunk  int64
	Chunks int
	// Blocks is the pinned staging blocks (and streams) a Staged transfer
	// rotates through, at most Chunks.
	Blocks int
	// Parts is the DMAs the data of a Packed transfer moves in (1 or more).
	Parts int
	// Cost is the model's prediction for the whole call.
	Cost time.Duration
}

// Bounds returns the byte offset of chunk i of a Staged plan over n bytes
// (0 <= i <= Chunks; Bounds(Chunks) is n).
func (p *Plan) Bounds(i int, n int64) int64 {
	return min(int64(i)*p.Chunk, n)
}

// Choose returns the cheapest plan for r under m within t, which takes its
// zero fields from DefaultTuning(maxProcs).
func Choose(r Request, t Tuning, m *Model, maxProcs int) Plan {
	t = t.withDefaults(maxProcs)
	if r.Copies <= 0 || r.Bytes <= 0 {
		return Plan{Kind: PerCopy, Workers: 1, Parts: 1}
	}
	n := float64(r.Bytes)
	l := m.link(r.Dir)
	w := t.workers(m, r.Bytes)
	best := Plan{Kind: PerCopy, Workers: w, Parts: 1,
		Cost: dur(m.hostCopy(n, w) + l.dma(n) + float64(r.Copies)*float64(m.DriverCopy) + float64(m.Wait))}
	found := false
	consider := func(p Plan, ok bool) {
		if !ok || (t.Only != 0 && !t.Only.Has(p.Kind)) {
			return
		}
		// Direct copies nothing on the host: it wins ties with PerCopy.
		if (t.Only != 0 && !found) || p.Cost < best.Cost || (p.Kind == Direct && p.Cost == best.Cost) {
			best, found = p, true
		}
	}
	if r.Pinned && r.Copies == 1 {
		consider(Plan{Kind: Direct, Workers: 1, Parts: 1, Cost: dur(l.dma(n) + float64(m.DriverCopy+m.Wait))}, true)
	}
	consider(choosePacked(r, t, m))
	consider(chooseStaged(r, t, m))
	return best
}

// CopyWorkers returns the goroutines that copy n bytes of host memory
// fastest under m within t (whose zero fields take DefaultTuning(maxProcs)'s
// values).
func CopyWorkers(n int64, t Tuning, m *Model, maxProcs int) int {
	t = t.withDefaults(maxProcs)
	return t.workers(m, n)
}

// workers is the goroutines that copy n bytes fastest under m, at most
// MaxWorkers and at most one per WorkerBytes.
func (t *Tuning) workers(m *Model, n int64) int {
	most := t.mostWorkers(n)
	best, bestT := 1, m.hostCopy(float64(n), 1)
	for w := 2; w <= most; w++ {
		if c := m.hostCopy(float64(n), w); c < bestT {
			best, bestT = w, c
		}
	}
	return best
}

// mostWorkers is the most goroutines worth copying n bytes: at most
// MaxWorkers and at most one per WorkerBytes.
func (t *Tuning) mostWorkers(n int64) int {
	return int(max(min(int64(t.MaxWorkers), n/t.WorkerBytes), 1))
}

// packable reports whether r may be packed under t.
func (t *Tuning) packable(r Request) bool {
	return t.PackMinCopies >= 0 && r.Copies >= t.PackMinCopies && r.Copies <= math.MaxUint32 &&
		r.PackedBytes >= r.Bytes && r.PackedBytes <= t.PackMaxBytes && r.Bytes/int64(r.Copies) <= t.PackMaxMean
}

// choosePacked returns the cheapest packed plan for r, trying every part
// count from 1 up to MaxChunks with parts of at least MinChunk bytes.
func choosePacked(r Request, t Tuning, m *Model) (Plan, bool) {
	if !t.packable(r) {
		return Plan{}, false
	}
	n := float64(r.Bytes)
	fixed := float64(m.Launch) + n/m.KernelGBps + float64(r.Copies)*float64(m.PackItem)
	if r.Dir == Readback {
		fixed += float64(m.DriverCopy) // the table goes up first
	}
	lo, hi := 1, int(min(int64(t.MaxChunks), int64(r.Copies), max(r.Bytes/t.MinChunk, 1)))
	switch {
	case r.Dir == Readback && !r.Drainable:
		// This readback lands whole before any piece reaches the caller.
		hi = 1
	case t.PackParts > 0:
		lo = min(t.PackParts, r.Copies)
		hi = lo
	}
	most := t.mostWorkers(r.Bytes)
	rates := newRateTable(m, most)
	var best Plan
	found := false
	for k := lo; k <= hi; k++ {
		c := math.Ceil(n / float64(k))
		// One copy job packs every part; parts are DMAs queued as they fill.
		// A readback in parts waits for each part's event, the last one
		// included, and so ends with no stream synchronization.
		polled := r.Dir == Readback && k > 1
		for w := 1; w <= most; w++ {
			cost := dur(fixed + m.stream(r.Dir, n, k, c, w, k, rates.at(m, w), polled))
			if !found || cost < best.Cost {
				best, found = Plan{Kind: Packed, Workers: w, Parts: k, Cost: cost}, true
			}
		}
	}
	return best, true
}

// chooseStaged returns the cheapest staged plan for r: one copy of at least
// StageMin bytes, in chunks of MinChunk to MaxChunk bytes.
func chooseStaged(r Request, t Tuning, m *Model) (Plan, bool) {
	if r.Copies != 1 || !r.Streamable || t.StageMin < 0 || r.Bytes < t.StageMin {
		return Plan{}, false
	}
	kmin := int(min(ceilDiv(r.Bytes, t.MaxChunk), math.MaxInt32))
	kmax := int(max(min(r.Bytes/t.MinChunk, int64(kmin)+int64(t.MaxChunks)-1), int64(kmin)))
	most := t.mostWorkers(r.Bytes)
	rates := newRateTable(m, most)
	var best Plan
	for k := kmin; k <= kmax; k++ {
		chunk := ceilDiv(r.Bytes, int64(k))
		if a := (chunk + chunkAlign - 1) &^ (chunkAlign - 1); chunk >= 64*chunkAlign && a <= t.MaxChunk {
			chunk = a // whole cache lines per chunk, for the copies' non-temporal stores
		}
		chunks := int(ceilDiv(r.Bytes, chunk))
		// A block per chunk up to MaxStaging: reusing a block makes its
		// next chunk wait for the DMA of the one before.
		blocks := int(min(int64(t.Blocks), int64(chunks), max(t.MaxStaging/chunk, 2)))
		// One copy job serves the whole call: its goroutines are chosen for
		// the whole transfer, not per chunk.
		for w := 1; w <= most; w++ {
			cost := dur(m.stream(r.Dir, float64(r.Bytes), chunks, float64(chunk), w, blocks, rates.at(m, w), true))
			if (k == kmin && w == 1) || cost < best.Cost {
				best = Plan{Kind: Staged, Workers: w, Chunk: chunk, Chunks: chunks, Blocks: blocks, Parts: 1, Cost: cost}
			}
		}
	}
	return best, true
}

// rateTable holds the host copy rate of 1 to len(r) goroutines, computed
// once per search: the searches evaluate the model for every chunking at
// every goroutine count, and interpolating the rate each time made
// planning one 16 MiB transfer cost about 50 us.
type rateTable struct {
	r [rateTableSize]float64
	n int
}

const rateTableSize = 64

func newRateTable(m *Model, most int) rateTable {
	var t rateTable
	t.n = min(most, rateTableSize)
	for w := 1; w <= t.n; w++ {
		t.r[w-1] = m.copyGBps(w)
	}
	return t
}

// at returns the copy rate of w goroutines.
func (t *rateTable) at(m *Model, w int) float64 {
	if w >= 1 && w <= t.n {
		return t.r[w-1]
	}
	return m.copyGBps(w)
}

// chunkAlign aligns chunks of 4 KiB or more.
const chunkAlign = 64

func ceilDiv(a, b int64) int64 { return a/b + min(a%b, 1) }

// dur converts model nanoseconds to a Duration, saturating.
func dur(ns float64) time.Duration {
	if !(ns < float64(math.MaxInt64)) {
		return math.MaxInt64
	}
	return time.Duration(max(ns, 0))
}
