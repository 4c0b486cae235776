package xferplan

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkPlan states what every plan promises, whatever the model: the kind
// applies to the request, the numbers are in range, a staged plan covers
// the bytes exactly.
func checkPlan(r Request, t Tuning, maxProcs int, p Plan) error {
	d := t.withDefaults(maxProcs)
	switch {
	case p.Workers < 1 || p.Workers > d.MaxWorkers:
		return fmt.Errorf("workers %d outside [1, %d]", p.Workers, d.MaxWorkers)
	case p.Parts < 1:
		return fmt.Errorf("parts %d", p.Parts)
	case p.Cost < 0:
		return fmt.Errorf("cost %v", p.Cost)
	case d.Only != 0 && p.Kind != PerCopy && !d.Only.Has(p.Kind):
		return fmt.Errorf("kind %v outside Only %b", p.Kind, d.Only)
	}
	if r.Copies <= 0 || r.Bytes <= 0 {
		if p.Kind != PerCopy {
			return fmt.Errorf("nothing to move planned as %v", p.Kind)
		}
		return nil
	}
	if p.Workers > 1 && int64(p.Workers) > r.Bytes/d.WorkerBytes {
		return fmt.Errorf("%d workers for %d bytes at %d bytes each", p.Workers, r.Bytes, d.WorkerBytes)
	}
	switch p.Kind {
	case Direct:
		if !r.Pinned || r.Copies != 1 {
			return fmt.Errorf("direct plan for %+v", r)
		}
	case Packed:
		if !d.packable(r) {
			return fmt.Errorf("packed plan for %+v under %+v", r, d)
		}
		if p.Parts > r.Copies || (r.Dir == Readback && !r.Drainable && p.Parts != 1) {
			return fmt.Errorf("%d parts for %d copies (%v)", p.Parts, r.Copies, r.Dir)
		}
	case Staged:
		if r.Copies != 1 || !r.Streamable || d.StageMin < 0 || r.Bytes < d.StageMin {
			return fmt.Errorf("staged plan for %+v", r)
		}
		if p.Chunk <= 0 || p.Chunks < 1 || p.Blocks < 1 || p.Blocks > min(p.Chunks, d.Blocks) {
			return fmt.Errorf("staged shape %+v", p)
		}
		if p.Bounds(p.Chunks, r.Bytes) != r.Bytes || p.Bounds(p.Chunks-1, r.Bytes) >= r.Bytes {
			return fmt.Errorf("%d chunks of %d do not cover %d bytes exactly", p.Chunks, p.Chunk, r.Bytes)
		}
		if p.Chunks > 1 && p.Chunk > d.MaxChunk {
			return fmt.Errorf("chunk %d above %d", p.Chunk, d.MaxChunk)
		}
		// Staging stays within MaxStaging (two blocks at least), and a
		// transfer that fits it reuses no block the tuning lets it have.
		if p.Blocks > 2 && int64(p.Blocks)*p.Chunk > d.MaxStaging {
			return fmt.Errorf("%d blocks of %d bytes above the %d-byte staging bound", p.Blocks, p.Chunk, d.MaxStaging)
		}
		if int64(p.Chunks)*p.Chunk <= d.MaxStaging && p.Blocks < min(p.Chunks, d.Blocks) {
			return fmt.Errorf("%d blocks for %d chunks that fit the staging bound", p.Blocks, p.Chunks)
		}
	}
	return nil
}

// randomRequest draws requests over every kind's range: tiny to huge,
// single to many copies, pinned or not.
func randomRequest(r *rand.Rand) Request {
	q := Request{Dir: Direction(r.Intn(2)), Copies: 1 + r.Intn(3000)*r.Intn(2),
		Bytes: int64(math.Exp2(r.Float64() * 30)), Pinned: r.Intn(4) == 0, Streamable: r.Intn(3) > 0}
	if q.Bytes < int64(q.Copies) {
		q.Bytes = int64(q.Copies)
	}
	if r.Intn(5) > 0 {
		q.PackedBytes = q.Bytes + int64(q.Copies)*40 + 16
	}
	return q
}

func TestChooseKeepsItsPromises(t *testing.T) {
	m := Reference()
	r := rand.New(rand.NewSource(1))
	seen := map[Kind]int{}
	for range 20000 {
		q := randomRequest(r)
		procs := 1 + r.Intn(32)
		p := Choose(q, Tuning{}, &m, procs)
		require.NoError(t, checkPlan(q, Tuning{}, procs, p), "%+v procs %d -> %+v", q, procs, p)
		seen[p.Kind]++
	}
	for _, k := range []Kind{PerCopy, Packed, Staged, Direct} {
		assert.Positive(t, seen[k], "the reference model chooses %v somewhere", k)
	}
}

// TestChooseIsNoWorseThanAnyOneKind: the plan chosen freely is predicted no
// slower than the best plan of any single kind that applies.
func TestChooseIsNoWorseThanAnyOneKind(t *testing.T) {
	m := Reference()
	r := rand.New(rand.NewSource(2))
	for range 5000 {
		q := randomRequest(r)
		free := Choose(q, Tuning{}, &m, 16)
		for _, k := range []Kind{PerCopy, Packed, Staged, Direct} {
			only := Choose(q, Tuning{Only: Kinds(k)}, &m, 16)
			if only.Kind == k {
				require.LessOrEqual(t, free.Cost, only.Cost, "%+v: free %+v, only %v %+v", q, free, k, only)
			}
		}
	}
}

func TestPinnedSingleCopiesMoveDirectly(t *testing.T) {
	m := Reference()
	for _, n := range []int64{1, 4 << 10, 1 << 20, 256 << 20} {
		for _, dir := range []Direction{Upload, Readback} {
			p := Choose(Request{Dir: dir, Copies: 1, Bytes: n, Pinned: true, Streamable: true}, Tuning{}, &m, 16)
			assert.Equal(t, Direct, p.Kind, "%d bytes %v", n, dir)
		}
	}
}

// TestLargeCopiesOverlapCopyAndDMA: from a few MiB on a 16-core host, one
// copy is staged in several chunks whose copies run on several goroutines,
// and its predicted rate beats copying first and moving after.
func TestLargeCopiesOverlapCopyAndDMA(t *testing.T) {
	m := Reference()
	for _, n := range []int64{4 << 20, 16 << 20, 64 << 20, 256 << 20} {
		q := Request{Copies: 1, Bytes: n, Streamable: true}
		p := Choose(q, Tuning{}, &m, 16)
		require.Equal(t, Staged, p.Kind, "%d bytes", n)
		assert.Greater(t, p.Chunks, 1)
		assert.Greater(t, p.Workers, 1)
		whole := Choose(q, Tuning{StageMin: -1}, &m, 16)
		assert.Less(t, p.Cost, whole.Cost, "%d bytes", n)
	}
}

// TestParallelismFollowsProcs: a 2-core host never plans more than two
// copy goroutines; a 16-core one uses more for large copies.
func TestParallelismFollowsProcs(t *testing.T) {
	m := Reference()
	q := Request{Copies: 1, Bytes: 64 << 20, Streamable: true}
	assert.LessOrEqual(t, Choose(q, Tuning{}, &m, 2).Workers, 2)
	assert.Greater(t, Choose(q, Tuning{}, &m, 16).Workers, 2)
	assert.Equal(t, 1, Choose(q, Tuning{}, &m, 1).Workers)
}

func TestManySmallCopiesArePacked(t *testing.T) {
	m := Reference()
	q := Request{Copies: 1024, Bytes: 4 << 20, PackedBytes: 4<<20 + 1024*40}
	assert.Equal(t, Packed, Choose(q, Tuning{}, &m, 16).Kind)
	q.PackedBytes = 0 // no kernel room
	assert.Equal(t, PerCopy, Choose(q, Tuning{}, &m, 16).Kind)
	q.PackedBytes = 4<<20 + 1024*40
	assert.Equal(t, PerCopy, Choose(q, Tuning{PackMinCopies: -1}, &m, 16).Kind)
}

func TestOnlyForcesAKindWhereItApplies(t *testing.T) {
	m := Reference()
	tiny := Request{Copies: 1, Bytes: 100, Streamable: true}
	p := Choose(tiny, Tuning{Only: Kinds(Staged), StageMin: 64, MinChunk: 16, MaxChunk: 16}, &m, 4)
	require.Equal(t, Staged, p.Kind)
	assert.Equal(t, 7, p.Chunks)
	assert.LessOrEqual(t, p.Chunk, int64(16))
	p = Choose(Request{Copies: 1, Bytes: 10, Streamable: true}, Tuning{Only: Kinds(Staged), StageMin: 64}, &m, 4)
	assert.Equal(t, PerCopy, p.Kind, "below StageMin the fallback")
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "per-copy", PerCopy.String())
	assert.Equal(t, "packed", Packed.String())
	assert.Equal(t, "staged", Staged.String())
	assert.Equal(t, "direct", Direct.String())
	assert.Equal(t, "Kind(9)", Kind(9).String())
	assert.False(t, Kinds(Kind(9)).Has(Kind(9)))
}

func TestNothingToMove(t *testing.T) {
	m := Reference()
	for _, q := range []Request{{}, {Copies: -1, Bytes: 5}, {Copies: 3, Bytes: -7}} {
		p := Choose(q, Tuning{}, &m, 4)
		assert.Equal(t, PerCopy, p.Kind)
		assert.Equal(t, time.Duration(0), p.Cost)
	}
}

func TestChooseAllocatesNothing(t *testing.T) {
	m := Reference()
	q := Request{Copies: 1, Bytes: 256 << 20, Streamable: true}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = Choose(q, Tuning{}, &m, 16) }))
}

// TestCostlierDMAsMeanFewerChunks: the more each further DMA on the stream
// costs (Link.Gap), the fewer chunks a staged plan uses, in both
// directions; with free DMAs it splits at least as finely as with costly
// ones.
func TestCostlierDMAsMeanFewerChunks(t *testing.T) {
	for _, dir := range []Direction{Upload, Readback} {
		prev := math.MaxInt
		for _, gap := range []time.Duration{0, 2500 * time.Nanosecond, 20 * time.Microsecond, 200 * time.Microsecond} {
			m := Reference()
			m.H2D.Gap, m.D2H.Gap = gap, gap
			p := Choose(Request{Dir: dir, Copies: 1, Bytes: 16 << 20, Streamable: true}, Tuning{Only: Kinds(Staged)}, &m, 16)
			require.Equal(t, Staged, p.Kind)
			assert.LessOrEqual(t, p.Chunks, prev, "gap %v (%v)", gap, dir)
			prev = p.Chunks
		}
		assert.LessOrEqual(t, prev, 3, "DMAs far costlier than their bytes: few chunks")
	}
}

// TestOneCopyJobPerCall: a staged call shares one copy job for the whole
// transfer, so its goroutines' start-up is paid once, not per chunk: where
// starting helpers costs something, a 1 MiB copy still uses several
// goroutines and several chunks, and is predicted faster than copying
// first and moving after.
func TestOneCopyJobPerCall(t *testing.T) {
	m := Reference()
	for _, dir := range []Direction{Upload, Readback} {
		q := Request{Dir: dir, Copies: 1, Bytes: 1 << 20, Streamable: true}
		p := Choose(q, Tuning{}, &m, 16)
		require.Equal(t, Staged, p.Kind)
		assert.Greater(t, p.Workers, 1)
		assert.Greater(t, p.Chunks, 1)
		serial := Choose(q, Tuning{StageMin: -1}, &m, 16)
		assert.Less(t, p.Cost, serial.Cost)
	}
}

// TestPackedPartsCoverTheCopies: a packed upload of many small copies
// moves in several parts when the copying is long enough to overlap, never
// in more parts than copies.
func TestPackedPartsCoverTheCopies(t *testing.T) {
	m := Reference()
	q := Request{Copies: 1024, Bytes: 4 << 20, PackedBytes: 4<<20 + 1024*40}
	p := Choose(q, Tuning{}, &m, 16)
	require.Equal(t, Packed, p.Kind)
	assert.Greater(t, p.Parts, 1)
	q.Copies, q.Bytes, q.PackedBytes = 40, 40*1024, 40*1024+40*40
	assert.LessOrEqual(t, Choose(q, Tuning{}, &m, 16).Parts, 40)
}

// TestDrainablePackedReadbacksMoveInParts: a packed readback whose
// caller takes each piece as it lands (W7's 2048 copies, 52.9 MiB) moves in
// several parts and is predicted faster than the same readback landing
// whole, which always moves in one DMA; PackParts fixes the parts of a
// drainable one.
func TestDrainablePackedReadbacksMoveInParts(t *testing.T) {
	m := Reference()
	q := Request{Dir: Readback, Copies: 2048, Bytes: 55 << 20, PackedBytes: 56 << 20}
	whole := Choose(q, Tuning{}, &m, 16)
	require.Equal(t, Packed, whole.Kind)
	assert.Equal(t, 1, whole.Parts)
	q.Drainable = true
	parts := Choose(q, Tuning{}, &m, 16)
	require.Equal(t, Packed, parts.Kind)
	assert.Greater(t, parts.Parts, 1)
	assert.Less(t, parts.Cost, whole.Cost)
	assert.Equal(t, 3, Choose(q, Tuning{PackParts: 3}, &m, 16).Parts)
}

// TestUploadCopyingKeepsNearTheLink: with DMASlowdown, an upload whose
// copying runs beside its DMAs (W7's packed upload, a 64 MiB staged one)
// uses fewer goroutines than without it, copying not much faster than the
// link takes the bytes; one whose copying waits for reused blocks (256
// MiB through a ring of blocks) is planned as without it.
func TestUploadCopyingKeepsNearTheLink(t *testing.T) {
	with, without := Reference(), Reference()
	without.DMASlowdown = 0
	for _, q := range []Request{
		{Dir: Upload, Copies: 2048, Bytes: 55 << 20, PackedBytes: 56 << 20},
		{Dir: Upload, Copies: 1, Bytes: 64 << 20, Streamable: true},
	} {
		p, base := Choose(q, Tuning{}, &with, 16), Choose(q, Tuning{}, &without, 16)
		assert.Less(t, p.Workers, base.Workers, "%+v", q)
		assert.LessOrEqual(t, with.copyGBps(p.Workers), with.H2D.PeakGBps*1.1, "%+v: %d goroutines", q, p.Workers)
	}
	ring := Request{Dir: Upload, Copies: 1, Bytes: 256 << 20, Streamable: true}
	p, base := Choose(ring, Tuning{}, &with, 16), Choose(ring, Tuning{}, &without, 16)
	require.Less(t, p.Blocks, p.Chunks)
	assert.Equal(t, base, p)
}

// TestStagedReadbacksPollTheirLastChunk: a staged readback ends when its
// last chunk's event says it landed, not with a stream synchronization, so
// a costlier synchronization leaves its cost alone while it raises the
// per-copy plan's.
func TestStagedReadbacksPollTheirLastChunk(t *testing.T) {
	q := Request{Dir: Readback, Copies: 1, Bytes: 4 << 20, Streamable: true}
	cheap, dear := Reference(), Reference()
	dear.Wait *= 20
	only := Tuning{Only: Kinds(Staged)}
	assert.Equal(t, Choose(q, only, &cheap, 16).Cost, Choose(q, only, &dear, 16).Cost)
	per := Tuning{StageMin: -1}
	assert.Greater(t, Choose(q, per, &dear, 16).Cost, Choose(q, per, &cheap, 16).Cost)
}

// TestPlansEndingOnAnEventPayItsLag: a staged readback and a packed
// readback in parts learn that their last DMA landed from an event, which
// reports it EventLag later than a stream synchronization would: their
// cost grows by exactly the lag, the per-copy plan's not at all, and a
// lag large enough makes one DMA and one synchronization the cheaper way.
func TestPlansEndingOnAnEventPayItsLag(t *testing.T) {
	base := Reference()
	slow := base
	slow.EventLag += 5 * time.Microsecond
	staged := Request{Dir: Readback, Copies: 1, Bytes: 4 << 20, Streamable: true}
	only := Tuning{Only: Kinds(Staged)}
	assert.Equal(t, 5*time.Microsecond, Choose(staged, only, &slow, 16).Cost-Choose(staged, only, &base, 16).Cost)
	per := Tuning{StageMin: -1}
	assert.Equal(t, Choose(staged, per, &base, 16).Cost, Choose(staged, per, &slow, 16).Cost)
	parts := Request{Dir: Readback, Copies: 1024, Bytes: 4 << 20, PackedBytes: 4<<20 + 24<<10, Drainable: true}
	three := Tuning{PackParts: 3}
	assert.Equal(t, 5*time.Microsecond, Choose(parts, three, &slow, 16).Cost-Choose(parts, three, &base, 16).Cost)
	huge := base
	huge.EventLag = time.Second
	assert.Equal(t, PerCopy, Choose(staged, Tuning{}, &huge, 16).Kind)
	assert.Equal(t, 1, Choose(parts, Tuning{}, &huge, 16).Parts)
}

// TestCopiesBeyondTheCacheUseHelpers: a copy of at most CacheBytes runs on
// one goroutine at CacheGBps; a larger one is spread over helpers when the
// model's rates make that faster.
func TestCopiesBeyondTheCacheUseHelpers(t *testing.T) {
	m := Reference()
	small := Request{Dir: Upload, Copies: 1, Bytes: m.CacheBytes, Streamable: true}
	assert.Equal(t, 1, Choose(small, Tuning{}, &m, 16).Workers)
	big := Request{Dir: Upload, Copies: 1, Bytes: 4 * m.CacheBytes, Streamable: true}
	assert.Greater(t, Choose(big, Tuning{StageMin: -1}, &m, 16).Workers, 1)
	m.CacheBytes = 8 * big.Bytes
	assert.Equal(t, 1, Choose(big, Tuning{StageMin: -1}, &m, 16).Workers, "within the cache, helpers gain nothing")
}

// TestStagedUploadsWithoutReuseRecordNoEvents: a staged upload that gives
// every chunk a block of its own is charged one driver call per chunk (its
// DMA), not two: a costlier driver call raises its cost by less than two
// calls per chunk.
func TestStagedUploadsWithoutReuseRecordNoEvents(t *testing.T) {
	q := Request{Dir: Upload, Copies: 1, Bytes: 16 << 20, Streamable: true}
	base := Reference()
	p := Choose(q, Tuning{Only: Kinds(Staged)}, &base, 1)
	require.Equal(t, Staged, p.Kind)
	require.Equal(t, p.Chunks, p.Blocks)
	dear := base
	dear.DriverCopy += time.Microsecond
	fixed := Tuning{Only: Kinds(Staged), MinChunk: p.Chunk, MaxChunk: p.Chunk, MaxWorkers: 1}
	grew := Choose(q, fixed, &dear, 1).Cost - Choose(q, fixed, &base, 1).Cost
	assert.Less(t, grew, time.Duration(2*p.Chunks)*time.Microsecond)
	assert.GreaterOrEqual(t, grew, time.Duration(p.Chunks)*time.Microsecond)
}

// checkBounds states how a plan stays inside its tuning's bounds at their
// edges: a packed plan never has more parts than copies, and has exactly
// min(PackParts, copies) where PackParts fixes them (else at most
// MaxChunks); a staged chunk is never over MaxChunk, even when rounding it
// up to whole cache lines would take it past; the chunks are no more than
// the search allows; the workers are no more than the bytes warrant.
func checkBounds(r Request, t Tuning, maxProcs int, p Plan) error {
	d := t.withDefaults(maxProcs)
	if r.Copies <= 0 || r.Bytes <= 0 {
		return nil
	}
	if most := d.mostWorkers(r.Bytes); p.Workers > most {
		return fmt.Errorf("%d workers, at most %d for %d bytes", p.Workers, most, r.Bytes)
	}
	switch p.Kind {
	case Packed:
		fixed := d.PackParts > 0 && (r.Dir == Upload || r.Drainable)
		switch {
		case p.Parts > r.Copies:
			return fmt.Errorf("%d parts for %d copies", p.Parts, r.Copies)
		case fixed && p.Parts != min(d.PackParts, r.Copies):
			return fmt.Errorf("%d parts where PackParts %d fixes %d for %d copies", p.Parts, d.PackParts, min(d.PackParts, r.Copies), r.Copies)
		case !fixed && p.Parts > d.MaxChunks:
			return fmt.Errorf("%d parts above MaxChunks %d", p.Parts, d.MaxChunks)
		}
	case Staged:
		kmin := ceilDiv(r.Bytes, d.MaxChunk)
		if kmin > math.MaxInt32 {
			return nil // the search caps its chunk count: a chunk may then exceed MaxChunk
		}
		lines := (p.Chunk + chunkAlign - 1) &^ (chunkAlign - 1)
		switch {
		case p.Chunk > d.MaxChunk:
			return fmt.Errorf("chunk %d above MaxChunk %d (%d chunks)", p.Chunk, d.MaxChunk, p.Chunks)
		case p.Chunk >= 64*chunkAlign && lines != p.Chunk && lines <= d.MaxChunk:
			return fmt.Errorf("chunk %d not rounded to whole cache lines though %d fits MaxChunk %d", p.Chunk, lines, d.MaxChunk)
		case int64(p.Chunks) > max(r.Bytes/d.MinChunk, kmin+int64(d.MaxChunks)-1, kmin):
			return fmt.Errorf("%d chunks beyond the search's bound", p.Chunks)
		}
	}
	return nil
}

// edgeTuning draws a tuning for q at the edges the planner clamps: chunk
// bounds a few bytes off whole cache lines with the request a multiple of
// MaxChunk (so the unclamped chunk is exactly MaxChunk), part counts at,
// around and far past the copies, and kinds forced with Only.
func edgeTuning(r *rand.Rand, q *Request) Tuning {
	lines := int64(64 + r.Intn(4096))
	maxChunk := lines*chunkAlign + []int64{0, 1, 7, 63, -1}[r.Intn(5)]
	t := Tuning{MaxChunk: maxChunk, MinChunk: maxChunk / int64(1+r.Intn(8)), MaxChunks: 1 + r.Intn(70),
		StageMin: int64(r.Intn(2)), PackMinCopies: 1 + r.Intn(4), PackMaxMean: 1 << 40, PackMaxBytes: 1 << 50,
		MaxWorkers: r.Intn(20), WorkerBytes: int64(1 + r.Intn(1<<16)), Blocks: r.Intn(8), MaxStaging: int64(r.Intn(1 << 26))}
	switch r.Intn(3) {
	case 0:
		q.Copies = 1
		q.Bytes = maxChunk*int64(1+r.Intn(5)) + int64(r.Intn(3)-1)
		q.Streamable, q.Pinned = true, false
		t.Only = Kinds(Staged)
	case 1:
		q.Copies = 1 + r.Intn(64)
		q.Bytes = int64(q.Copies) * int64(1+r.Intn(1<<16))
		q.PackedBytes = q.Bytes + int64(q.Copies)*40 + 16
		q.Drainable = r.Intn(2) == 0
		t.PackParts = []int{q.Copies - 1, q.Copies, q.Copies + 1, 2 * q.Copies, 1000, r.Intn(70)}[r.Intn(6)]
		t.MinChunk = 1 + int64(r.Intn(4096))
		t.Only = Kinds(Packed)
	}
	return t
}

// TestChosenPlansKeepTheirTuningsBounds checks every chosen plan against
// its tuning's bounds for drawn tunings, edges included (edgeTuning), and
// for drawn requests under default and drawn tunings.
func TestChosenPlansKeepTheirTuningsBounds(t *testing.T) {
	m := Reference()
	r := rand.New(rand.NewSource(28))
	seen := map[Kind]int{}
	for i := range 30000 {
		q := randomRequest(r)
		tu := Tuning{}
		if i%3 > 0 {
			tu = edgeTuning(r, &q)
		}
		procs := 1 + r.Intn(32)
		p := Choose(q, tu, &m, procs)
		require.NoError(t, checkPlan(q, tu, procs, p), "%+v under %+v (procs %d) -> %+v", q, tu, procs, p)
		require.NoError(t, checkBounds(q, tu, procs, p), "%+v under %+v (procs %d) -> %+v", q, tu, procs, p)
		seen[p.Kind]++
	}
	assert.Positive(t, seen[Packed])
	assert.Positive(t, seen[Staged])
}
