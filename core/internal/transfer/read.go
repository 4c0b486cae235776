package transfer

import (
	"fmt"
	"math"
	"sync"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Read is a readback of n requests: their lengths (Lens, which the caller
// fills while validating), then, once Gather has run, their bytes in pinned
// staging, valid until Release.
type Read struct {
	st     hostmem.Staging
	staged bool // st holds blocks; a zero staging is never released
	stage  []byte
	views  []fusion.ReadbackView // nil: request i is the whole of copy i
	offs   []int                 // staging offset of each fused copy
	size   int                   // a batch's staging for its fused copies, padded (Batch.Fuse)
	lens   []int                 // requested length of each request
	direct []byte                // a single staged or direct read, already in its output
	out    []byte                // the output into gave, for a single read staged whole
	tune   Tuning
	plan   xferplan.Plan // Workers unpacks; zero (as built by Run): one thread
	// ntStores: put writes the caller's slots with non-temporal stores.
	ntStores bool
	// landed is how many bytes at the start of stage the device wrote.
	landed int
	// evictLater: a readback that evicts its staging (tune.EvictReads)
	// leaves it to release, which evicts it after the call returned
	// (hostmem.Staging.EvictLater); set by NewRead, whose callers release
	// right after unpacking. Otherwise the unpack evicts each request's
	// bytes itself (batches, whose staging a graph reuses without release).
	evictLater bool
	// unpacked: the staging was copied out, so release may evict it.
	unpacked bool
	// split: copyOut splits each copy over the plan's goroutines;
	// evictPieces: each goroutine evicts the staging it copied.
	split, evictPieces bool
	// kept: a graph reuses the staging; release gives nothing back (Keep).
	kept bool
	// alt is a graph's second block for the data of its reads in parts,
	// landed in turn with stage (batchparts.go); turn is the block the
	// next replay evicts after landing, and evicting[k] the eviction of
	// block k still running.
	alt      []byte
	turn     int
	evicting [2]sync.WaitGroup
	// drain, when set, is where a readback of many requests puts each
	// request's bytes (drain.go, packedread.go); drained says they are all
	// there.
	drain   *Drain
	drained bool
	// ints are pooled slices (lens, offs) release gives back.
	ints  []*[]int
	intsA [2]*[]int // backs ints
}

// bytes returns request i's bytes; they alias staging and are valid until
// release.
func (g *Read) bytes(i int) []byte {
	if g.lens[i] == 0 {
		return nil
	}
	if g.views == nil {
		start := g.offs[i]
		return g.stage[start : start+g.lens[i]]
	}
	v := g.views[i]
	start := g.offs[v.Slot] + v.Offset
	return g.stage[start : start+v.Len]
}

// fill writes requests first..first+n-1 into dst's slots, append-style.
func (g *Read) fill(dst [][]byte, first, n int) [][]byte {
	out := GrowSlots(dst, n)
	g.eachFrom(first, n, func(i int) { out[i] = g.put(out[i], g.bytes(first+i)) })
	return out
}

// put returns dst[:0] with src appended, append-style (new storage only
// when dst's capacity is too small). A readback too large for the caches
// (unpackNTBytes) writes dst with non-temporal stores (internal/ntcopy),
// which skip reading each destination line first: W7's readback (52.9 MiB
// into 2048 slots) unpacked in 987 us with them and 1315 us without on the
// reference H100 host. Callers of put fence afterwards.
func (g *Read) put(dst, src []byte) []byte {
	if cap(dst) < len(src) {
		return append(dst[:0], src...)
	}
	dst = dst[:len(src)]
	g.copyOut(dst, src)
	return dst
}

// copyOut copies src into dst (of its length), with non-temporal stores
// when g.ntStores says so, on the plan's goroutines when g.split says so;
// callers fence afterwards.
func (g *Read) copyOut(dst, src []byte) {
	if g.split {
		copyjob.ParallelCopy(dst, src, g.plan.Workers, g.tune.Linger, g.copyPiece)
		return
	}
	g.copyOne(dst, src)
}

// copyPiece is one piece of a split copyOut: copied, then evicted from the
// caches when g.evictPieces says so.
func (g *Read) copyPiece(dst, src []byte) {
	g.copyOne(dst, src)
	if g.evictPieces {
		ntcopy.Evict(src)
	}
}

// copyOne is copyOut on the calling goroutine.
func (g *Read) copyOne(dst, src []byte) {
	if g.ntStores {
		ntcopy.Copy(dst, src)
	} else {
		copy(dst, src)
	}
}

// unpackNTBytes is the readback size from which unpacking writes the
// caller's slots with non-temporal stores: past what the caches of the
// reference host hold, the slots' lines would be evicted before the caller
// reads them anyway.
const unpackNTBytes = 16 << 20

// eachFrom runs f(i) for requests first..first+n-1, with f given the index
// relative to first, as eachRun splits them. f must touch only slot i.
func (g *Read) eachFrom(first, n int, f func(i int)) {
	g.eachRun(first, n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f(i)
		}
	})
}

// eachRun runs f over runs [lo, hi) covering requests first..first+n-1
// (indices relative to first), on several goroutines when there are enough
// bytes to unpack that one thread would dominate the call (1024 x 4 KiB is
// about 0.4 ms on one thread). f reads the requests' staging (bytes) and
// must touch only their slots. When the readback evicts its staging
// (g.tune.EvictReads), release does it after the call (evictLater);
// otherwise each run's staging is evicted here, once read, on the goroutine
// that read it.
func (g *Read) eachRun(first, n int, f func(lo, hi int)) {
	w := g.plan.Workers
	g.unpacked = true
	evict := g.tune.EvictReads && !g.evictLater
	run := func(lo, hi int) {
		f(lo, hi)
		for i := lo; evict && i < hi; i++ {
			ntcopy.Evict(g.bytes(first + i))
		}
		ntcopy.Fence() // f may have used non-temporal stores
	}
	if w <= 1 || n < 2 {
		// One request (a batch's single large read) is split into
		// pieces instead, each evicted by the goroutine that copied it:
		// one thread copies about 10 GB/s out of staging the device just
		// wrote.
		if g.split = w > 1 && n == 1; g.split {
			g.evictPieces, evict = evict, false
		}
		run(0, n)
		g.split, g.evictPieces = false, false
		return
	}
	sp := GetInts(n)
	defer PutInts(sp)
	starts := *sp
	acc := 0
	for i := range n {
		starts[i] = acc
		acc += g.lens[first+i]
	}
	copyjob.ForParts(n, w, g.tune.Linger, func(i int) int { return starts[i] }, acc, run)
}

// release gives the staging back. A readback that evicts its staging
// later (evictLater) and was unpacked hands its blocks to an eviction job
// instead, which gives them back once the lines the device wrote are
// evicted; the call returns meanwhile.
func (g *Read) release() {
	if g.kept {
		return
	}
	g.evicting[0].Wait()
	g.evicting[1].Wait()
	for i, p := range g.ints {
		PutInts(p)
		g.ints[i] = nil
	}
	g.ints = g.ints[:0]
	if !g.staged {
		return
	}
	if g.evictLater && g.unpacked && g.tune.EvictReads && g.landed > 0 {
		g.st.EvictLater([][]byte{g.stage[:g.landed]}, g.plan.Workers, g.tune.Linger)
		return
	}
	g.st.ReturnAll()
}

// NewRead returns an empty readback of n requests, its lens from the pool
// (Release gives them back), with the drain d (nil: the caller copies the
// bytes out itself, with Single or Fill). Its callers release it right
// after unpacking, so it evicts its staging after the call (evictLater)
// unless a test asks otherwise.
func (e *Engine[E]) NewRead(n int, d *Drain) *Read {
	g := &Read{tune: e.tune, evictLater: !e.tune.InlineEvict, drain: d}
	lens := GetInts(n)
	g.ints = append(g.intsA[:0], lens)
	g.lens = *lens
	return g
}

// Lens returns the requests' lengths, which the caller fills in.
func (g *Read) Lens() []int { return g.lens }

// PrewakeFor wakes, before the caller validates the requests, the copy
// helpers a readback of them will want, the first being first bytes long
// (Tuning.PrewakeFor). A readback with a drain should wake them only once
// it knows its plan, which Gather does.
func (g *Read) PrewakeFor(first int) { g.tune.PrewakeFor(len(g.lens), first) }

// Fill writes every request's bytes into dst's slots, append-style: slot i
// reuses the capacity of dst's i-th slice, and dst's own capacity is
// reused for the slots.
func (g *Read) Fill(dst [][]byte) [][]byte { return g.fill(dst, 0, len(g.lens)) }

// Release gives the staging back (see release); the bytes Gather left in
// it are gone.
func (g *Read) Release() { g.release() }

// Staging returns the pinned staging the read lands in, for a quarantine
// of the work that writes it.
func (g *Read) Staging() *hostmem.Staging { return &g.st }

// Keep has Release give nothing back, for a read whose staging a captured
// graph reuses at every replay; Drop gives it back (at the graph's Close).
func (g *Read) Keep() { g.kept = true }

// Drop gives back the staging of a read Keep kept.
func (g *Read) Drop() {
	g.kept = false
	g.release()
}

// UseStaging has the requests land in stage, staging the caller owns (a
// captured graph's), laid out as the batch's fused reads are.
func (g *Read) UseStaging(stage []byte) { g.stage = stage }

// Single returns the one request of a readback whose Gather was given
// into: the output into gave, already holding the bytes when a staged or
// direct plan moved them there, or else output(n) (the output into gave,
// for a per-copy plan) with the bytes copied out of the staging on the
// plan's goroutines.
func (g *Read) Single(output func(n int) []byte) []byte {
	if g.direct != nil {
		return g.direct
	}
	src := g.bytes(0)
	out := g.out
	if out == nil {
		out = output(len(src))
	}
	copyjob.ParallelCopy(out, src, g.plan.Workers, g.tune.Linger, copyOut)
	g.unpacked = true // release evicts the staging
	Phase("unpack")
	return out
}

// copyOut copies readback staging out with ordinary loads and stores.
func copyOut(dst, src []byte) { copy(dst, src) }

// Gather reads the requests reqs (validated: request i reads reqs[i], and
// nonEmpty of them are not empty; the caller holds their buffers bufs in
// flight) into g: fused, staged into one pinned block, queued on one
// leased stream and fenced once. Nothing about the caller's outputs is
// touched here, so a failure leaves them as they were, except by a staged
// or direct single read (core's Download says how).
//
// The planner chooses the plan. Many small fused copies take the packed
// path (packed.go), or the per-copy path when the device has no memory for
// its staging. into, when not nil, offers a single request's destination:
// Gather asks it for the output; a staged (staged.go) or direct plan moves
// the bytes straight into it, and a per-copy one keeps it for Single.
func (e *Engine[E]) Gather(op string, g *Read, bufs []E, reqs []fusion.ReadbackCopy, nonEmpty int, into func(n int) []byte) error {
	n, d := len(g.lens), g.drain
	fused, err := FuseReads(reqs)
	if err != nil {
		return &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Detail: "fusing the readbacks failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	if fused.Bytes > math.MaxInt {
		return errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", fused.Bytes),
			"split the batch into smaller ones")
	}
	g.views = fused.Views
	g.ntStores = fused.Bytes >= unpackNTBytes && !g.tune.PlainUnpack
	g.tune.EvictReads = g.tune.EvictsReadback(fused.Bytes)
	Phase("fuse")
	t := &g.tune
	req := xferplan.Request{Dir: xferplan.Readback, Copies: len(fused.Copies), Bytes: int64(fused.Bytes),
		PackedBytes: PackedBound(len(fused.Copies), fused.Bytes),
		Streamable:  into != nil && n == 1 && len(fused.Copies) == 1 && !t.AtomicReads,
		Drainable:   d != nil && !t.AtomicReads}
	var out []byte
	var reg *hostmem.Region
	if req.Streamable {
		out = into(int(fused.Bytes))
		reg = e.Pinned(out)
		req.Pinned = reg != nil
	}
	g.plan, g.out = t.Choose(req), out
	if d != nil && !(g.plan.Kind == xferplan.Packed && g.plan.Parts > 1) {
		// A readback with a drain wakes its helpers only now that it
		// knows its plan; one in parts wakes them once its first part is
		// queued (landPackedParts). Helpers polling from the call's start
		// slowed its driver calls (the table's DMA and the gather launch
		// took 15-28 and 17-22 us on the reference host for W7).
		t.PrewakeHelpers(g.plan.Workers)
	}
	Phase("plan")
	if reg != nil && g.plan.Kind != xferplan.Direct {
		e.pinned.Done(reg)
	}
	return e.moveReads(op, g, bufs, &fused, out, reg, nonEmpty)
}

// moveReads moves the fused readback copies as g's plan says: straight
// into out (direct, staged), or into g's staging (packed, else per-copy).
func (e *Engine[E]) moveReads(op string, g *Read, bufs []E, fused *fusion.FusedReadbacks,
	out []byte, reg *hostmem.Region, nonEmpty int) error {
	t := &g.tune
	switch g.plan.Kind {
	case xferplan.Direct, xferplan.Staged:
		var err error
		if g.plan.Kind == xferplan.Direct {
			err = e.downloadDirect(op, bufs, reg, out, fused.Copies[0].Src)
		} else {
			err = e.downloadPipelined(op, t, &g.plan, bufs, out, fused.Copies[0].Src)
		}
		if err == nil {
			g.direct = out
		}
		return err
	case xferplan.Packed:
		err := e.gatherPacked(op, t, &g.plan, bufs, g, fused.Copies, fused.Bytes, nonEmpty)
		if err != errNoPackRoom {
			return err
		}
		// No device memory for packed staging: the per-copy path below needs none.
	}
	return e.gatherPerCopy(op, bufs, g, fused.Copies, fused.Bytes, nonEmpty)
}

// gatherPerCopy reads copies (bytes in all, nonEmpty requests) into one
// pinned staging block with one driver copy each on one leased stream and
// one fence. On success g holds the staging and the copies' offsets in it;
// on failure it holds nothing and nothing is leaked.
func (e *Engine[E]) gatherPerCopy(op string, bufs []E, g *Read, copies []fusion.ReadbackCopy, bytes uint64, nonEmpty int) error {
	g.offs = make([]int, len(copies))
	off := 0
	for i, c := range copies {
		g.offs[i] = off
		off += c.Len
	}

	g.st, g.staged = hostmem.NewStaging(e.host), true
	stage, err := g.st.Slice(op, int(bytes))
	if err != nil {
		g.st.ReturnAll()
		return err
	}
	g.stage, g.landed = stage, int(bytes)
	Phase("staging")
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		g.st.ReturnAll()
		return err
	}
	Phase("lease")
	for i, c := range copies {
		end := g.offs[i] + c.Len
		if err := e.drv.MemcpyDtoHAsync(stage[g.offs[i]:end:end], c.Src, lease.Stream); err != nil {
			e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&g.st}, Bufs: bufs}, lease)
			g.st.ReturnAll()
			return errs.Driver(op, "MemcpyDtoHAsync", err)
		}
	}
	Phase("dma")
	if err := e.drv.StreamSynchronize(lease.Stream); err != nil {
		e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&g.st}, Bufs: bufs}, lease)
		g.st.ReturnAll()
		return errs.Driver(op, "StreamSynchronize", err)
	}
	Phase("fence")
	e.launch.Return(lease, true)
	e.tel.SyncPoints.Add(1)
	e.tel.D2HBytes.Add(bytes)
	e.tel.ReadbackOps.Add(1)
	e.tel.Requested.Add(uint64(nonEmpty))
	e.tel.DeviceCopies.Add(uint64(len(copies)))
	return nil
}

// evictAfter evicts b, block k of a graph's read staging, from the caches
// as a background job of the copy helpers (copyjob.Background, up to w of
// them, in pieces of evictPiece bytes), so the replay returns before it
// ends; the landing into block k waits for it first, and so does release.
func (g *Read) evictAfter(k int, b []byte, w int) {
	n := (len(b) + evictPiece - 1) / evictPiece
	if n == 0 {
		return
	}
	g.evicting[k].Add(1)
	j := new(copyjob.Job)
	j.Init(n, g.tune.Linger, false, func(i int) {
		ntcopy.Evict(b[i*evictPiece : min((i+1)*evictPiece, len(b))])
	}, g.evicting[k].Done)
	copyjob.Background(j, w)
}

// evictPiece is the staging one task of evictAfter evicts.
const evictPiece = 64 << 10
