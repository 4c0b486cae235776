package transfer

import (
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A staged transfer (xferplan.Staged) moves one large copy in chunks
// through a ring of pinned staging blocks. One copy job covers the whole
// transfer, split into tasks that never straddle a chunk; the goroutines
// that copy (the caller among them) claim tasks in order for the whole
// call, and the caller queues each chunk's DMA as soon as its last task
// returns (uploads), or opens a chunk's tasks as soon as its DMA has landed
// (readbacks). Every DMA goes on one stream, so the DMA engine runs them
// back to back and only the first pays the engine's start-up latency.
// Events recorded after the DMAs (a few, used in rotation: a later event
// done means every DMA before it is done) tell when a chunk has landed or
// its block is free again; an upload that reuses no block records none.
//
// Sharing one job per call, not one per chunk, is what makes chunks cheap:
// on the reference H100 host the earlier design, which started and joined
// its helpers for every chunk and waited on a stream per block, moved 1 MiB
// in 7 chunks in 115 us, against 32 us for the DMA alone.

// stagedRun is the state of one staged transfer.
type stagedRun[E any] struct {
	p       *pipeline[E]
	pl      *xferplan.Plan
	host    []byte
	dev     uint64
	n       int64
	tasks   int64          // tasks per chunk
	task    int64          // bytes per task
	remain  []atomic.Int32 // per chunk: tasks not yet returned
	job     *copyjob.Job
	aborted atomic.Bool // set on failure: unclaimed tasks then copy nothing
	t       *Tuning
	waits   uint64 // host waits on the device, for telemetry
	// deferEvict: a readback of at most EvictLaterMaxBytes in at most
	// hostmem.InlineEvictBlocks blocks that evicts its staging
	// (t.EvictReads), and whose bucket holds a second set of blocks,
	// leaves each block's last chunk to an eviction job after the call
	// (finishRead) instead of evicting it in the copy out (unless
	// t.InlineStaged). See EvictLaterMaxBytes.
	deferEvict bool
	// second: such a readback that found one set (deferEvict false) pins
	// the second set or notes its end in finishRead (SecondSet.End).
	second hostmem.SecondSet
	// on is the stream the DMAs go on when it is not the first lease's
	// (a batch's read, LandRead); 0: the first lease's.
	on driver.Stream
}

// newStagedRun plans the tasks of pl over host and takes the pipeline's
// staging blocks and streams (one per block; the DMAs use the first, the
// blocks' events tell when each is free).
func (e *Engine[E]) newStagedRun(op string, t *Tuning, pl *xferplan.Plan, bufs []E, host []byte, dev uint64, up bool) (*stagedRun[E], error) {
	k := max(pl.Chunks, 1)
	blocks := max(min(pl.Blocks, k), 1)
	events := min(blocks, maxStageEvents) // an upload that reuses no block waits on none
	if !up {
		events = min(k, maxStageEvents)
	} else if blocks == k {
		events = 1
	}
	p, err := e.newPipeline(op, bufs, blocks, int(pl.Chunk), events)
	if err != nil {
		return nil, err
	}
	return e.stagedRunOn(p, t, pl, host, dev, up), nil
}

// stagedPipeline takes the staging blocks and event leases a staged
// readback of pl needs (newStagedRun's, for a run started later with
// stagedRunOn).
func (e *Engine[E]) stagedPipeline(op string, pl *xferplan.Plan) (*pipeline[E], error) {
	k := max(pl.Chunks, 1)
	return e.newPipeline(op, nil, max(min(pl.Blocks, k), 1), int(pl.Chunk), min(k, maxStageEvents))
}

// stagedRunOn plans the tasks of pl over host on the blocks and leases of
// p, whose DMAs go on p's first lease's stream unless r.stream is set.
func (e *Engine[E]) stagedRunOn(p *pipeline[E], t *Tuning, pl *xferplan.Plan, host []byte, dev uint64, up bool) *stagedRun[E] {
	k := max(pl.Chunks, 1)
	w := max(pl.Workers, 1)
	task := int64(copyjob.CopyTask(int(pl.Chunk), w))
	r := &stagedRun[E]{p: p, pl: pl, host: host, dev: dev, n: int64(len(host)), task: task, t: t,
		tasks: (pl.Chunk + task - 1) / task, remain: make([]atomic.Int32, k)}
	for c := range r.remain {
		r.remain[c].Store(int32(r.tasks))
	}
	if !up && !t.InlineStaged && t.EvictReads && !t.InlineEvict && len(host) <= EvictLaterMaxBytes &&
		len(p.blocks) <= hostmem.InlineEvictBlocks {
		// With a second set of blocks the next readback has staging
		// while this one's is evicted; without, it would wait for it.
		size := p.st.Blocks()[0].Size() // the whole bucket
		r.deferEvict, r.second = e.host.DeferEviction(size, len(p.blocks))
	}
	r.job = copyjob.NewJob(k*int(r.tasks), t.PipeLinger, true, func(i int) { r.copyTask(i, up) })
	return r
}

// copyTask copies task i between the caller's memory and its chunk's block
// (into the block for an upload, out of it for a readback), leaving the
// block's lines out of the caches as r.t says (StageIn, StageOut); an
// upload's non-temporal stores are fenced before the task counts as done.
func (r *stagedRun[E]) copyTask(i int, up bool) {
	c := int64(i) / r.tasks
	if !r.aborted.Load() {
		base := c * r.pl.Chunk
		lo := min(base+int64(i)%r.tasks*r.task, r.n)
		hi := min(lo+r.task, base+r.pl.Chunk, r.n)
		if lo < hi {
			blk := r.p.blocks[c%int64(len(r.p.blocks))]
			switch {
			case up:
				r.t.StageIn(blk[lo-base:hi-base], r.host[lo:hi])
				ntcopy.Fence()
			case r.deferEvict && c+int64(len(r.p.blocks)) >= int64(len(r.remain)):
				// The block's last chunk of the call: finishRead leaves
				// its eviction to the helpers after the call.
				copy(r.host[lo:hi], blk[lo-base:hi-base])
			default:
				r.t.StageOut(r.host[lo:hi], blk[lo-base:hi-base])
			}
		}
	}
	r.remain[c].Add(-1)
}

// open lets the tasks of chunks [0, c) be claimed.
func (r *stagedRun[E]) open(c int) { r.job.Open(int64(c) * r.tasks) }

// bounds returns chunk c's byte range.
func (r *stagedRun[E]) bounds(c int) (lo, hi int64) {
	return min(int64(c)*r.pl.Chunk, r.n), min(int64(c+1)*r.pl.Chunk, r.n)
}

// maxStageEvents bounds the events (and leases) of one staged transfer.
const maxStageEvents = 8

// queue queues chunk c's DMA on the run's stream and, when record is set,
// records chunk c's event slot after it.
func (r *stagedRun[E]) queue(c int, up, record bool) error {
	e, op := r.p.e, r.p.op
	lo, hi := r.bounds(c)
	j := c % len(r.p.blocks)
	blk := r.p.blocks[j][: hi-lo : hi-lo]
	s := r.on
	if s == 0 {
		s = r.p.leases[0].Stream
	}
	if up {
		if err := e.drv.MemcpyHtoDAsync(r.dev+uint64(lo), blk, s); err != nil {
			return errs.Driver(op, "MemcpyHtoDAsync", err)
		}
	} else if err := e.drv.MemcpyDtoHAsync(blk, r.dev+uint64(lo), s); err != nil {
		return errs.Driver(op, "MemcpyDtoHAsync", err)
	}
	if !record {
		return nil
	}
	if err := e.drv.EventRecord(r.p.leases[c%len(r.p.leases)].Done, s); err != nil {
		return errs.Driver(op, "EventRecord", err)
	}
	return nil
}

// landed reports whether chunk c's DMA has completed: the latest record of
// its event slot is chunk c's or a later one's on the same stream.
func (r *stagedRun[E]) landed(c int) (bool, error) {
	done, err := r.p.e.drv.EventQuery(r.p.leases[c%len(r.p.leases)].Done)
	if err != nil {
		return false, errs.Driver(r.p.op, "EventQuery", err)
	}
	return done, nil
}

// stop ends the copy job: after a failure the unclaimed tasks copy nothing;
// either way every task has returned when stop does, so nothing touches
// the caller's memory or the blocks afterwards.
func (r *stagedRun[E]) stop(shared, failed bool) { r.job.Stop(&r.aborted, shared, failed) }

// uploadPipelined copies data to device address dst as the Staged plan pl
// says. Telemetry counts each chunk as a device copy and each wait for a
// staging block, plus the final stream synchronization, as a sync point.
func (e *Engine[E]) uploadPipelined(op string, t *Tuning, pl *xferplan.Plan, bufs []E, dst uint64, data []byte, requested int) error {
	r, err := e.newStagedRun(op, t, pl, bufs, data, dst, true)
	if err != nil {
		return err
	}
	Phase("staging")
	k, blocks := len(r.remain), len(r.p.blocks)
	record := blocks < k
	opened := blocks
	r.open(opened)
	shared := copyjob.Start(r.job, pl.Workers)
	var sp spin.Spinner
	for q := 0; q < k; {
		switch {
		case r.remain[q].Load() == 0:
			// Chunk q is staged: queue its DMA.
			if err := r.queue(q, true, record); err != nil {
				r.stop(shared, true)
				return r.p.fail(err)
			}
			if q == 0 {
				Phase("first-dma")
			}
			q++
		case opened < k && opened-blocks < q:
			// The block of chunk opened held chunk opened-blocks, queued.
			done, err := r.landed(opened - blocks)
			if err != nil {
				r.stop(shared, true)
				return r.p.fail(err)
			}
			if done {
				r.waits++
				opened++
				r.open(opened)
			} else if !r.job.Step() {
				sp.Pause()
			}
		default:
			if !r.job.Step() {
				sp.Pause()
			}
		}
	}
	Phase("last-dma")
	r.stop(shared, false)
	if err := r.p.wait(0); err != nil {
		return r.p.fail(err)
	}
	Phase("fence")
	r.p.finish(true)
	e.tel.SyncPoints.Add(r.waits + 1)
	e.tel.H2DBytes.Add(uint64(len(data)))
	e.tel.UploadOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	e.tel.DeviceCopies.Add(uint64(k))
	return nil
}

// downloadPipelined copies len(out) bytes from device address src into out
// as the Staged plan pl says: the DMAs of the first chunks are queued at
// once, each chunk's copy out of staging starts when its DMA has landed,
// and a block is refilled as soon as its chunk has been copied out.
//
// out is written chunk by chunk as the data arrives: a driver failure after
// the first chunk leaves a prefix of out holding device bytes (callers
// reusing caller storage document this). Telemetry counts each chunk as a
// device copy and each wait for one to land as a sync point.
func (e *Engine[E]) downloadPipelined(op string, t *Tuning, pl *xferplan.Plan, bufs []E, out []byte, src uint64) error {
	r, err := e.newStagedRun(op, t, pl, bufs, out, src, false)
	if err != nil {
		return err
	}
	Phase("staging")
	if err := r.land(); err != nil {
		return r.p.fail(err)
	}
	Phase("copied")
	r.finishRead()
	e.tel.SyncPoints.Add(r.waits)
	e.tel.D2HBytes.Add(uint64(len(out)))
	e.tel.ReadbackOps.Add(1)
	e.tel.Requested.Add(1)
	e.tel.DeviceCopies.Add(uint64(len(r.remain)))
	return nil
}

// land queues r's chunks (a readback) and copies each out as soon as it
// has landed, until all are copied out. Every copy task has returned when
// it does, failed or not; on failure the caller drains the stream before
// the staging goes back.
func (r *stagedRun[E]) land() error {
	k, blocks, events := len(r.remain), len(r.p.blocks), len(r.p.leases)
	ahead := min(blocks, events)
	for c := range ahead {
		if err := r.queue(c, false, true); err != nil {
			return err
		}
	}
	shared := copyjob.Start(r.job, r.pl.Workers)
	queued, opened, copied := ahead, 0, 0
	var sp spin.Spinner
	for copied < k {
		switch {
		case r.remain[copied].Load() == 0:
			copied++
		case queued < k && queued-opened < events && (queued < blocks || r.remain[queued-blocks].Load() == 0):
			// Chunk queued's block is free (never used, or its chunk is
			// copied out) and so is its event slot (the chunk that last
			// used it has landed).
			if err := r.queue(queued, false, true); err != nil {
				r.stop(shared, true)
				return err
			}
			queued++
		case opened < queued:
			done, err := r.landed(opened)
			if err != nil {
				r.stop(shared, true)
				return err
			}
			if done {
				if opened == 0 {
					Phase("first-landed")
				}
				r.waits++
				opened++
				r.open(opened)
			} else if !r.job.Step() {
				sp.Pause()
			}
		default:
			if !r.job.Step() {
				sp.Pause()
			}
		}
	}
	r.stop(shared, false)
	return nil
}

// finishRead ends a readback whose chunks are all copied out: the streams
// go back, and so do the staging blocks, through an eviction job that
// evicts what each block's last chunk wrote when the run defers that
// (deferEvict); the call returns meanwhile.
func (r *stagedRun[E]) finishRead() {
	if !r.deferEvict {
		r.p.finish(true)
		r.second.End()
		return
	}
	r.p.giveBackLeases(true)
	blocks := r.p.blocks
	var regions [hostmem.InlineEvictBlocks][]byte // deferEvict holds at most hostmem.InlineEvictBlocks blocks
	for c := range r.remain {
		lo, hi := r.bounds(c)
		j := c % len(blocks)
		if int(hi-lo) > len(regions[j]) {
			regions[j] = blocks[j][:hi-lo]
		}
	}
	r.p.st.EvictLater(regions[:len(blocks)], r.pl.Workers, r.t.Linger)
}

// pipeline is the staging blocks and streams of one pipelined transfer.
type pipeline[E any] struct {
	e      *Engine[E]
	op     string
	bufs   []E // the transfer's buffer, for the quarantine
	st     hostmem.Staging
	blocks [][]byte
	leases []*streams.Lease
	syncs  uint64 // stream synchronizations that succeeded
}

// newPipeline takes k staging blocks of chunk bytes and leases leased
// streams (with their events), all or nothing, for a transfer whose caller
// holds bufs in flight.
func (e *Engine[E]) newPipeline(op string, bufs []E, k, chunk, leases int) (*pipeline[E], error) {
	p := &pipeline[E]{e: e, op: op, bufs: bufs, st: hostmem.NewStaging(e.host)}
	p.blocks = make([][]byte, k)
	for j := range p.blocks {
		blk, err := p.st.Slice(op, chunk)
		if err != nil {
			p.st.ReturnAll()
			return nil, err
		}
		p.blocks[j] = blk
	}
	p.leases = make([]*streams.Lease, 0, leases)
	for range leases {
		l, err := e.launch.Lease(op, false)
		if err != nil {
			p.finish(true)
			return nil, err
		}
		p.leases = append(p.leases, l)
	}
	return p, nil
}

// wait blocks until the work queued on block j's stream has completed.
func (p *pipeline[E]) wait(j int) error {
	if err := p.e.drv.StreamSynchronize(p.leases[j].Stream); err != nil {
		return errs.Driver(p.op, "StreamSynchronize", err)
	}
	p.syncs++
	return nil
}

// fail drains every stream so no queued copy still uses the staging, gives
// everything back (or, when a drain fails, quarantines it) and returns err.
func (p *pipeline[E]) fail(err error) error {
	p.e.SyncOrQuarantine(p.op, InUse[E]{St: []*hostmem.Staging{&p.st}, Bufs: p.bufs}, p.leases...)
	p.leases = nil
	p.st.ReturnAll()
	return err
}

// finish gives the streams back (healthy or not) and the staging blocks to
// their pool. Every stream must be idle.
func (p *pipeline[E]) finish(healthy bool) {
	p.giveBackLeases(healthy)
	p.st.ReturnAll()
}

// giveBackLeases gives the streams back (healthy or not); every stream
// must be idle.
func (p *pipeline[E]) giveBackLeases(healthy bool) {
	for _, l := range p.leases {
		p.e.launch.Return(l, healthy)
	}
	p.leases = nil
}
