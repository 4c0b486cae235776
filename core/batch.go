package core

import (
	"context"
	"fmt"
	"sort"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// Fill sets every byte of Buf to Value by device memset.
type Fill struct {
	Buf   Buffer
	Value byte
}

// Step is one step of a Batch: a kernel launch, Program over Bufs (in the
// program's order) with Config; or, with Collective set (and Program, Bufs
// and Config's arguments left empty), this rank's part of a collective
// over a Comm of the batch's Backend (see Batch).
type Step struct {
	Program    *Program
	Bufs       []Buffer
	Config     DispatchConfig
	Collective *CollectiveStep
}

// Batch is one request of device work, run on one stream with one fence, in
// this order: Clears and Fills (device memsets, no host-to-device bytes),
// then Uploads (fused and planned like Upload: packed, staged in chunks or
// one copy each), then Steps in order, each seeing what the ones before it
// wrote, then Reads (fused and planned like DownloadMany) of what the last
// step left. Clears, Fills and Uploads into a buffer of a static upload
// set are refused with ErrOwned.
//
// Memory pinned through the Backend (AllocHostPinned, PinHostBuffer) moves
// without copies: an upload whose Data lies in it, and whose range meets no
// other upload of the batch, is one DMA straight from Data, and a read
// whose destination lies in it lands there directly: one DMA, or a copy
// kernel for 64 KiB-2 MiB into AllocHostPinned memory behind the batch's
// kernel steps (WithKernelReads, which applies to such reads into the
// staging of Go memory too); WithAtomicReadbacks stages it instead.
// A read's destination is known when the work is submitted if Into gives
// it, or, for Run, if the read's slot in dst has the capacity to hold it.
// Many small such copies are packed instead, as others are (with 32 or
// more in one direction, those under 64 KiB), landing in the same places.
// Such pinned memory stays in flight until the work is collected (for a
// Graph, until Close): PinnedBuffer.Free and UnpinHostBuffer refuse it
// with ErrInFlight meanwhile, and the caller must not change pinned upload
// Data before then. A failed call may have written part of a pinned
// destination, as a failed direct Download may.
//
// A step with Collective set is this rank's part of a collective (all-
// reduce, broadcast, all-gather, reduce-scatter) over its Comm, queued on
// the batch's stream between the steps around it, so a training step
// (upload, kernel, all-reduce, kernel, read) is one batch with one fence.
// Every rank runs a batch (or a Comm call, or a graph replay) with the
// same collectives in the same order; one process driving several devices
// runs each device's batch on a goroutine of its own (Group.Comm gives
// each device's rank). The step's buffers are pinned with the batch's
// others and checked like a Comm call's (its own shape; a static upload
// set's buffer as Recv is ErrOwned); a nil Comm, another Backend's, and a
// step that is also a kernel are ErrInvalidArgument, a closed or aborted
// Comm ErrClosed, all before anything is queued. With
// WithCollectiveChecks, each collective step is first compared with the
// other ranks' call (an exchange of one small all-gather and two copies,
// each with its own fence, per step); a rank whose batch is refused before
// anything is queued tells the others through that exchange. Once a
// collective may have been queued, any failure (a driver failure while
// queueing, a failed fence) aborts the batch's communicators, so that no
// rank waits for this one, and Comm calls then fail with ErrClosed.
// Comm.Close refuses with ErrInFlight while work or a Graph with a
// collective step on the Comm is uncollected or open.
type Batch struct {
	Clears  []Buffer   // zeroed by device memset
	Fills   []Fill     // set to a byte value by device memset
	Uploads []UploadAt // written from host memory
	Steps   []Step     // kernel launches and collectives, in order
	Reads   []Range    // read back after the last step
	// Into, when not empty, gives each read its destination at
	// submission: Into[i], exactly Reads[i].Len bytes long (nil: the read
	// lands in its result slot as usual). Read i then lands in Into[i], and
	// its result slot (Run, AwaitInto, Replay) is Into[i] itself.
	Into [][]byte
}

// Run runs batch and waits for it with one fence. The bytes of Reads come
// back in dst's slots, one per read in order, append-style (slot i reuses
// the capacity of dst's i-th slice; dst's capacity is reused for the
// slots; a slot whose capacity lies in pinned memory receives its read
// directly, see Batch). A batch whose one read is large and lands in Go
// memory moves it in chunks after the rest of the work instead, each chunk
// copied into the slot as soon as it has landed, the last landing serving
// as the fence. Everything is validated before anything is queued: a bad
// handle, range, program arity, scalar count or buffer length fails the
// call with nothing changed. On failure dst is returned unchanged; a
// device failure after some chunks of such a read landed may leave part of
// its bytes in the slot's storage, as DownloadSlice may
// (WithAtomicReadbacks rules that out).
func (b *Backend) Run(batch Batch, dst [][]byte) ([][]byte, error) {
	const op = "Run"
	bc, err := lockComms(context.Background(), op, b, batch.Steps)
	if err != nil {
		return dst, err
	}
	defer bc.unlock()
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &batch, false, dst, bc)
	bc.unlock()
	if err != nil {
		return dst, err
	}
	return w.awaitInto(op, dst)
}

// RunAsync validates and queues batch like Run and returns without waiting.
// The returned Pending holds every buffer the batch names in flight until
// the work completes; collect it with Await, AwaitInto (for the reads) or
// Close. Upload data is copied into staging before RunAsync returns, so the
// caller may reuse it at once, except Data in pinned memory, which the
// work reads by DMA until it is collected (see Batch); give read
// destinations in Batch.Into to have reads land there directly.
func (b *Backend) RunAsync(batch Batch) (*Pending, error) {
	const op = "RunAsync"
	bc, err := lockComms(context.Background(), op, b, batch.Steps)
	if err != nil {
		return nil, err
	}
	defer bc.unlock()
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &batch, true, nil, bc)
	if err != nil {
		return nil, err
	}
	return newPending(w), nil
}

// batchLayout maps a position in the flat list of buffers a batch names to
// the item it came from, for messages.
type batchLayout struct {
	clears, fills, uploads, steps, reads int    // section starts
	stepStarts                           []int  // start of each step's buffers
	coll                                 []bool // each step: a collective (its buffers: recv, send)
}

func (l *batchLayout) label(i int) string {
	switch {
	case i < l.fills:
		return fmt.Sprintf("clear %d: ", i-l.clears)
	case i < l.uploads:
		return fmt.Sprintf("fill %d: ", i-l.fills)
	case i < l.steps:
		return fmt.Sprintf("upload %d: ", i-l.uploads)
	case i < l.reads:
		s := sort.Search(len(l.stepStarts), func(k int) bool { return l.stepStarts[k] > i }) - 1
		if l.coll != nil && l.coll[s] {
			return fmt.Sprintf("step %d %s: ", s, [2]string{"recv", "send"}[i-l.stepStarts[s]])
		}
		return fmt.Sprintf("step %d buffer %d: ", s, i-l.stepStarts[s])
	}
	return fmt.Sprintf("read %d: ", i-l.reads)
}

// launchPlan is one validated step: a launch, or a collective (coll set).
type launchPlan struct {
	fn    Function
	cfg   LaunchConfig
	args  []KernelArg
	waits bool      // the launched image waits on its grid dependencies (pdl.go)
	coll  *collPlan // set for a collective step, which launches nothing
}

// batchPlan is a validated Batch, ready to be queued on a stream: its
// buffers are pinned (ents), its copies fused and its launches resolved.
// Building one queues nothing and stages nothing.
type batchPlan struct {
	batch    *Batch
	lay      batchLayout
	ents     []*residentEntry // the entry of every buffer position the batch names
	pinned   []*residentEntry // in-flight marks: each distinct buffer once (pinBatch)
	plans    []launchPlan
	xfer     transfer.Batch // the uploads and reads; enqueue plans them (unplanned, as captured: per copy)
	timing   bool
	stepBufs [][]Buffer // each step's buffers: Bufs, or a typed step's from its Args
	ownSteps bool       // batch.Steps is the plan's copy (untypeStep), not the caller's
	into     [][]byte   // each read's destination known at submission (nil: none)
	colls    int        // collective steps
}

// work counts the device operations the plan queues (0: nothing reaches
// the device).
func (pl *batchPlan) work() int {
	return len(pl.batch.Clears) + len(pl.batch.Fills) + len(pl.xfer.FusedUps) + len(pl.plans) + pl.xfer.NonEmptyReads +
		len(pl.xfer.DirectUps) + len(pl.xfer.DirectRds)
}

// enqueue validates batch, queues it on one leased stream and returns the
// Pending that owns what it holds. Validation, module loading and staging
// all happen before the first operation is queued. polled is true when the
// work may be observed with IsReady (a Pending handed out, or a wait that
// polls): only then is the completion event recorded, since a blocking wait
// synchronizes the stream and never reads it. runDst is Run's dst (nil
// otherwise). bc holds the Comms of the batch's collective steps, locked
// (nil when it has none): enqueue exchanges call descriptions through
// them where they check calls, and aborts them when queueing fails.
func (b *Backend) enqueue(op string, batch *Batch, polled bool, runDst [][]byte, bc *batchComms) (*pendingWork, error) {
	pl, err := b.planBatch(op, batch, runDst)
	if err != nil {
		bc.refuse(op, err)
		return nil, err
	}
	owned := false
	defer func() {
		if !owned {
			b.xfer.ReleaseBatch(&pl.xfer)
			b.store.unpinEntries(op, pl.pinned)
		}
	}()
	pl.xfer.Blocking = !polled // a single large read may then land after the work (awaitInto)
	if err = b.xfer.PlanBatch(op, &pl.xfer, false); err != nil {
		bc.refuse(op, err)
		return nil, err
	}
	transfer.Phase("plan")
	rd := pl.xfer.Rd
	p := &pendingWork{b: b, op: op, up: hostmem.NewStaging(b.hostPool), rd: rd, nReads: len(batch.Reads), timing: pl.timing,
		xfer: &pl.xfer, into: pl.into}
	if pl.work() == 0 {
		// Nothing reaches the device: the marks drop now and the reads (all
		// empty) wait for AwaitInto.
		p.state = pendingSettled
		if rd == nil {
			p.state = pendingCollected
		}
		return p, nil
	}

	// Staging.
	release := func() {
		p.up.ReturnAll()
		if rd != nil {
			rd.Release()
		}
		b.xfer.ReleaseBatch(&pl.xfer)
	}
	upStage, err := b.xfer.StageBatch(op, &pl.xfer, &p.up)
	transfer.Phase("stage")
	var lease *streams.Lease
	if err == nil {
		lease, err = b.launch.Lease(op, pl.timing)
	}
	if err != nil {
		bc.refuse(op, err)
	} else if err = bc.agree(op, pl); err != nil {
		b.launch.Return(lease, true) // nothing was queued
	}
	if err != nil {
		release()
		return nil, err
	}

	// Queue everything; a driver failure drains what was queued so no copy
	// still uses the staging, then releases it all (or, when the drain
	// fails, quarantines it).
	qerr := b.queueBatch(op, lease.Stream, pl, upStage, lease.Start, lease.End)
	transfer.Phase("queue")
	if qerr == nil && polled {
		if err := b.drv.EventRecord(lease.Done, lease.Stream); err != nil {
			qerr = driverError(op, "EventRecord", err)
		}
	}
	if qerr != nil {
		abortComms(bc.list()) // a queued collective part would wait for ranks that wait for this one
		h := held{St: []*hostmem.Staging{&p.up}, Bufs: pl.pinned, Dev: pl.xfer.DevStaging(), RegionsOf: &pl.xfer.Regions}
		if rd != nil {
			h.St = append(h.St, rd.Staging())
		}
		b.xfer.SyncOrQuarantine(op, h, lease)
		release()
		return nil, qerr
	}
	owned = true
	p.lease, p.ents, p.comms, p.commUses = lease, pl.pinned, bc.list(), true
	useComms(p.comms, 1)
	b.countBatch(pl)
	return p, nil
}

// countBatch adds what one run of pl moves, launches and takes part in to
// the telemetry.
func (b *Backend) countBatch(pl *batchPlan) {
	b.tel.MemsetOps.Add(uint64(len(pl.batch.Clears) + len(pl.batch.Fills)))
	b.tel.KernelLaunches.Add(uint64(len(pl.plans) - pl.colls))
	b.tel.Collectives.Add(uint64(pl.colls))
	b.xfer.CountBatch(&pl.xfer)
}

// planBatch validates batch and resolves everything queueBatch needs. On
// success the batch's buffers are pinned (pl.pinned), and the pinned host
// memory its direct copies use is held (pl.xfer.Regions): the caller
// releases both when the work is done or abandoned. On failure nothing is
// held. runDst is Run's dst (nil otherwise).
func (b *Backend) planBatch(op string, batch *Batch, runDst [][]byte) (*batchPlan, error) {
	pl := &batchPlan{batch: batch}
	counts, nArgs, err := pl.checkShapes(op)
	if err != nil {
		return nil, err
	}
	pl.xfer.AfterSteps = len(pl.plans) > pl.colls
	if pl.ents, pl.pinned, err = b.pinBatch(op, pl.bufs(), &pl.lay); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			b.xfer.ReleaseBatch(&pl.xfer)
			b.store.unpinEntries(op, pl.pinned)
		}
	}()
	if err := pl.checkWritable(op); err != nil {
		return nil, err
	}
	if err := b.resolveCopies(op, pl, runDst); err != nil {
		return nil, err
	}
	if err := b.resolveLaunches(op, pl, counts, nArgs); err != nil {
		return nil, err
	}
	ok = true
	return pl, nil
}

// checkShapes validates what needs no resident table: programs, arity and
// scalars. It fills the layout and the launch geometry, and returns each
// step's element count and the number of kernel parameters of all steps.
func (pl *batchPlan) checkShapes(op string) ([]uint32, int, error) {
	batch := pl.batch
	pl.lay = batchLayout{stepStarts: make([]int, len(batch.Steps))}
	n := len(batch.Clears) + len(batch.Fills) + len(batch.Uploads)
	pl.lay.fills = len(batch.Clears)
	pl.lay.uploads = pl.lay.fills + len(batch.Fills)
	pl.lay.steps = n
	pl.plans = make([]launchPlan, len(batch.Steps))
	counts := make([]uint32, len(batch.Steps))
	nArgs := 0
	pl.stepBufs = make([][]Buffer, len(batch.Steps))
	for i := range batch.Steps {
		s := &batch.Steps[i]
		if s.Collective != nil {
			if err := pl.collStep(op, i, n); err != nil {
				return nil, 0, err
			}
			n += len(pl.stepBufs[i])
			continue
		}
		if s.Program == nil {
			return nil, 0, newError(op, KindInvalidArgument, fmt.Sprintf("step %d: program is nil", i),
				"build the program with NewProgram or use a built-in such as ProgramVAddU32")
		}
		if s.Program.argTypes != nil && len(s.Config.Args) > 0 {
			if err := pl.untypeStep(op, i); err != nil {
				return nil, 0, err
			}
			s = &batch.Steps[i]
		}
		pl.stepBufs[i] = s.Bufs
		if s.Program.typed() {
			var err error
			if pl.stepBufs[i], err = s.Program.typedBuffers(op, i, s); err != nil {
				return nil, 0, err
			}
		}
		cfg, count, err := s.Program.checkDispatch(op, i, pl.stepBufs[i], &s.Config)
		if err != nil {
			return nil, 0, err
		}
		pl.plans[i].cfg, counts[i] = cfg, count
		pl.lay.stepStarts[i] = n
		n += len(pl.stepBufs[i])
		nArgs += s.Program.args
		pl.timing = pl.timing || s.Config.Timing
	}
	pl.lay.reads = n
	return counts, nArgs, nil
}

// checkWritable refuses a clear, fill or upload into a buffer of a static
// upload set, and one as a collective step's recv (ErrOwned); kernel steps
// may bind such buffers, to read them.
func (pl *batchPlan) checkWritable(op string) error {
	batch, lay := pl.batch, &pl.lay
	for i := range pl.plans {
		if k := lay.stepStarts[i]; pl.plans[i].coll != nil && pl.ents[k].static.Load() {
			err := staticWrite(op, batch.Steps[i].Collective.Recv)
			err.Detail = lay.label(k) + err.Detail
			return err
		}
	}
	for i := range lay.steps {
		if !pl.ents[i].static.Load() {
			continue
		}
		var h Buffer
		switch {
		case i < lay.fills:
			h = batch.Clears[i]
		case i < lay.uploads:
			h = batch.Fills[i-lay.fills].Buf
		default:
			h = batch.Uploads[i-lay.uploads].Buf
		}
		err := staticWrite(op, h)
		err.Detail = lay.label(i) + err.Detail
		return err
	}
	return nil
}

// bufs lists every buffer the batch names, in layout order.
func (pl *batchPlan) bufs() []Buffer {
	batch := pl.batch
	bufs := make([]Buffer, 0, pl.lay.reads+len(batch.Reads))
	bufs = append(bufs, batch.Clears...)
	for _, f := range batch.Fills {
		bufs = append(bufs, f.Buf)
	}
	for _, u := range batch.Uploads {
		bufs = append(bufs, u.Buf)
	}
	for _, sb := range pl.stepBufs {
		bufs = append(bufs, sb...)
	}
	for _, r := range batch.Reads {
		bufs = append(bufs, r.Buf)
	}
	return bufs
}

// resolveLaunches builds each step's kernel parameters and looks up its
// function, loading modules on first use.
func (b *Backend) resolveLaunches(op string, pl *batchPlan, counts []uint32, nArgs int) error {
	batch := pl.batch
	args := make([]KernelArg, nArgs)
	var last *Program
	var f Function
	var err error
	waits := false
	for i := range batch.Steps {
		s := &batch.Steps[i]
		if pl.plans[i].coll != nil {
			continue
		}
		if s.Program != last { // sequences usually repeat one program; skip the cache lock
			if f, err = b.function(op, s.Program); err != nil {
				return err
			}
			last, waits = s.Program, s.Program.waitsOnGrid(b.pdl)
		}
		pl.plans[i].waits = waits
		a := args[:s.Program.args:s.Program.args]
		args = args[s.Program.args:]
		if s.Program.typed() {
			fillTyped(a, s.Config.Args, pl.ents[pl.lay.stepStarts[i]:])
			pl.plans[i].fn, pl.plans[i].args = f, a
			continue
		}
		for k := range s.Bufs {
			a[k] = KernelArg{Ptr: pl.ents[pl.lay.stepStarts[i]+k].ptr, IsPtr: true}
		}
		k := len(s.Bufs)
		if s.Program.spec.Count {
			a[k] = KernelArg{U32: counts[i]}
			k++
		}
		for _, v := range s.Config.Scalars {
			a[k] = KernelArg{U32: v}
			k++
		}
		pl.plans[i].fn, pl.plans[i].args = f, a
	}
	return nil
}

// queueBatch queues pl on s: clears and fills, the uploads from upStage
// (staged by transfer.Engine.StageBatch), the steps, bracketed by start and
// end when both are set, then the reads into pl.xfer.Rd's staging. It
// records no completion event, so it serves both a run (the caller records
// one) and a stream capture (where nothing may be recorded for the host to
// wait on). On failure some of it may be queued; the caller drains s.
func (b *Backend) queueBatch(op string, s Stream, pl *batchPlan, upStage []byte, start, end Event) *Error {
	batch := pl.batch
	for i, h := range batch.Clears {
		if err := b.drv.MemsetD8Async(pl.ents[i].ptr, 0, uint64(h.Len), s); err != nil {
			return driverError(op, "MemsetD8Async", err)
		}
	}
	for i, f := range batch.Fills {
		if err := b.drv.MemsetD8Async(pl.ents[pl.lay.fills+i].ptr, f.Value, uint64(f.Buf.Len), s); err != nil {
			return driverError(op, "MemsetD8Async", err)
		}
	}
	if call, err := b.xfer.QueueBatchUploads(s, &pl.xfer, upStage); err != nil {
		return driverError(op, call, err)
	}
	timed := start != 0 && end != 0
	if timed {
		if err := b.drv.EventRecord(start, s); err != nil {
			return driverError(op, "EventRecord", err)
		}
	}
	if err := b.queueSteps(op, s, pl); err != nil {
		return err
	}
	if timed {
		if err := b.drv.EventRecord(end, s); err != nil {
			return driverError(op, "EventRecord", err)
		}
	}
	if pl.xfer.Reads() {
		if call, err := b.xfer.QueueBatchReads(s, &pl.xfer); err != nil {
			return driverError(op, call, err)
		}
	}
	return nil
}

// pinBatch pins the distinct buffers of a batch once each, so an entry's
// in-flight count counts unfinished batches (what Free's message
// reports), and returns the entry of every position of bufs (ents) and the
// pinned entries to release (pinned).
func (b *Backend) pinBatch(op string, bufs []Buffer, lay *batchLayout) (ents, pinned []*residentEntry, err error) {
	uniq, first, slot := dedupeBuffers(bufs)
	pinned, err = b.store.pinEntries(op, uniq, func(i int) string { return lay.label(first[i]) })
	if err != nil {
		return nil, nil, err
	}
	ents = make([]*residentEntry, len(bufs))
	for i := range bufs {
		ents[i] = pinned[slot[i]]
	}
	return ents, pinned, nil
}
