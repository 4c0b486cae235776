package core

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/capture"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// Pending is device work queued by RunAsync or DispatchAsync and not
// yet collected. Until it completes, the buffers it binds are in flight:
// Free refuses them and Backend.Close refuses with ErrInFlight.
//
// Completion, whichever way it is observed (IsReady, Await, AwaitInto,
// Close), drops the in-flight marks and returns the stream, events and
// upload staging to their pools, on success and on failure alike (when a
// failed stream cannot even be drained, the Backend quarantines them, and
// keeps the bound buffers in flight, until it synchronizes; see
// Backend.Close). A Pending
// with reads keeps the staging holding their bytes, and its launch lease, until
// AwaitInto or Close collects them; until then Backend.Close still refuses.
//
// A Pending is safe for concurrent use; its methods never take Backend
// locks. It is not tied to a goroutine.
//
// A Pending that is dropped without Await, AwaitInto or Close is collected
// once the garbage collector finds it unreachable: its work is waited for
// and everything it holds released, with a warning logged to the Backend's
// logger, so the buffers it bound can be freed and the Backend closed.
// Until that happens (it needs a garbage collection) Free and Close
// still refuse; collect every Pending explicitly.
type Pending struct {
	w *pendingWork
}

// pendingWork is what a Pending holds. It is separate from the Pending so
// a cleanup attached to the Pending can collect it once the Pending itself
// is unreachable.
type pendingWork struct {
	b     *Backend
	op    string // the call that queued the work
	async bool   // handed out as a Pending: its failures name the queuing call in the detail

	mu    sync.Mutex // guards every field below
	state pendingState
	err   error // the work's failure, once settled

	lease   *streams.Lease  // nil once given back
	up      hostmem.Staging // upload staging; released at completion
	rd      *transfer.Read  // read staging and views; nil without reads
	xfer    *transfer.Batch // packed transfers' device staging; released at completion
	nReads  int
	into    [][]byte         // reads' destinations given at submission (Batch.Into)
	ents    []*residentEntry // in-flight marks; nil once dropped
	timing  bool
	graph   *capture.Graph // the device graph this work replays, or nil
	devTime time.Duration
	timeErr error

	// comms are the Comms of the work's collective steps (nil: none); a
	// failure aborts them. commUses: the work holds a use of each (batch
	// work, until settled; a graph's replay uses the graph's).
	comms    []*Comm
	commUses bool
	// abortErr is set, before the comms are aborted, when a context wait
	// gave up on the work: it is then the work's failure.
	abortErr atomic.Pointer[Error]
}

type pendingState int

const (
	pendingQueued    pendingState = iota // work queued, nothing observed
	pendingSettled                       // work finished (or failed); reads may wait for collection
	pendingCollected                     // everything released; reads delivered or dropped
)

// IsReady reports whether the work has finished, without blocking. It
// returns true with the failure when the work or the query failed; Await
// then reports the same failure. Once it reports true the bound buffers are
// no longer in flight.
func (p *Pending) IsReady() (bool, error) {
	const op = "Pending.IsReady"
	w, err := p.work(op)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	done := w.query()
	if !done {
		return false, nil
	}
	return true, withOp(op, w.err)
}

// query settles the work when its completion event says it has finished
// (or the query fails) and reports whether it is settled. Callers hold mu.
func (w *pendingWork) query() bool {
	if w.state != pendingQueued {
		return true
	}
	done, qerr := w.b.drv.EventQuery(w.lease.Done)
	if qerr != nil {
		w.fail(w.driverError("EventQuery", qerr))
		return true
	}
	if !done {
		return false
	}
	w.complete()
	return true
}

// work returns p's state, or an ErrInvalidArgument for a nil Pending.
func (p *Pending) work(op string) (*pendingWork, error) {
	if p == nil || p.w == nil {
		return nil, newError(op, KindInvalidArgument, "the Pending is nil",
			"use the Pending returned by RunAsync or DispatchAsync, after checking its error")
	}
	return p.w, nil
}

// driverError wraps a driver failure of the work's fence or query, naming
// the call that queued the work; each method reports it under its own name.
func (w *pendingWork) driverError(call string, err error) *Error {
	e := driverError(w.op, call, err)
	if w.async {
		e.Detail = fmt.Sprintf("work queued by %s: %s", w.op, e.Detail)
	}
	return e
}

// Await blocks until the work has finished and returns its failure, if any.
// Reads, if the work has any, stay available to AwaitInto.
func (p *Pending) Await() error {
	const op = "Pending.Await"
	w, err := p.work(op)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return withOp(op, w.wait())
}

// AwaitInto waits for the work and returns the bytes of its reads, one slot
// per Batch.Reads item in order, written into dst append-style: slot i
// reuses the capacity of dst's i-th slice and dst's own capacity is reused
// for the slots. On failure it returns dst unchanged. Reads are delivered
// once: after AwaitInto (or Close) has collected them, a further AwaitInto
// fails with ErrClosed.
func (p *Pending) AwaitInto(dst [][]byte) ([][]byte, error) {
	const op = "Pending.AwaitInto"
	w, err := p.work(op)
	if err != nil {
		return dst, err
	}
	return w.awaitInto(op, dst)
}

// awaitInto is AwaitInto, its errors naming op.
func (w *pendingWork) awaitInto(op string, dst [][]byte) ([][]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == pendingQueued && w.xfer.LandsRead() {
		return w.landRead(op, dst)
	}
	if err := w.wait(); err != nil {
		return dst, withOp(op, err)
	}
	if w.state == pendingCollected {
		if w.nReads == 0 {
			return transfer.GrowSlots(dst, 0), nil
		}
		return dst, newError(op, KindClosed,
			fmt.Sprintf("the %d read(s) of this pending work were already collected", w.nReads),
			"call AwaitInto once per Pending, and keep its result")
	}
	transfer.Phase("fence")
	out := fillReads(w.rd, dst, w.into, w.nReads)
	transfer.Phase("fill")
	w.collect(true)
	return out, nil
}

// landRead collects the queued work of a Run whose one read lands after
// it in chunks (transfer.Batch.LandsRead), straight into its destination
// given at submission (Batch.Into), else into the storage of dst's first
// slot (append-style): the last chunk's landing is the fence. On failure
// dst is returned, that storage perhaps holding part of the read. Callers
// hold mu.
func (w *pendingWork) landRead(op string, dst [][]byte) ([][]byte, error) {
	var out []byte
	if w.into != nil && w.into[0] != nil {
		out = w.into[0] // as long as the read (checkInto)
	} else {
		out = transfer.SlotDest(dst)(0, w.rd.Lens()[0])
	}
	if err := w.b.xfer.LandRead(w.xfer, w.lease.Stream, out); err != nil {
		e, ok := err.(*Error)
		if !ok {
			e = w.driverError("MemcpyDtoHAsync", err)
		}
		w.fail(e)
		return dst, withOp(op, w.err)
	}
	transfer.Phase("fence")
	w.complete()
	if w.err != nil {
		return dst, withOp(op, w.err)
	}
	res := transfer.GrowSlots(dst, 1)
	res[0] = out
	w.collect(true)
	return res, nil
}

// Close releases everything the Pending holds, waiting for the work first if
// it has not finished. It returns the failure of that wait, if Close had to
// wait and the wait failed; otherwise nil. Uncollected reads are dropped.
// Calling it again does nothing.
func (p *Pending) Close() error {
	const op = "Pending.Close"
	w, err := p.work(op)
	if err != nil {
		return err
	}
	return w.close(op)
}

// close is Close, its errors naming op.
func (w *pendingWork) close(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if w.state == pendingQueued {
		err = withOp(op, w.wait())
	}
	if w.state == pendingSettled {
		w.collect(w.err == nil)
	}
	return err
}

// DeviceTime returns the device time between the first and the last kernel
// launch of the work, measured with timing events, once the work has
// finished successfully. It fails with ErrInvalidArgument when no dispatch
// asked for timing (DispatchConfig.Timing) or the work has not finished
// (call Await first), and with the driver's error when the measurement
// failed.
func (p *Pending) DeviceTime() (time.Duration, error) {
	const op = "Pending.DeviceTime"
	w, err := p.work(op)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.timing:
		return 0, newError(op, KindInvalidArgument, "no dispatch of this work asked for timing",
			"set DispatchConfig.Timing on the dispatch to time")
	case w.state == pendingQueued:
		return 0, newError(op, KindInvalidArgument, "the work has not finished",
			"call Await (or wait for IsReady) before DeviceTime")
	case w.err != nil:
		return 0, withOp(op, w.err)
	}
	return w.devTime, withOp(op, w.timeErr)
}

// newPending hands w to the caller as a Pending, with a cleanup that
// collects w if the Pending is dropped uncollected.
func newPending(w *pendingWork) *Pending {
	w.async = true // before anyone else can see w
	p := &Pending{w: w}
	runtime.AddCleanup(p, collectDropped, w)
	return p
}

// collectDropped runs after a Pending became unreachable. Work already
// collected needs nothing; otherwise it is waited for and released on a
// goroutine of its own, so a long fence does not hold up the runtime's
// cleanups.
func collectDropped(w *pendingWork) {
	w.mu.Lock()
	done := w.state == pendingCollected
	w.mu.Unlock()
	if !done {
		go w.collectDropped()
	}
}

func (w *pendingWork) collectDropped() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == pendingCollected {
		return
	}
	if w.lease != nil || w.ents != nil { // work that reached the device, or buffers held
		w.b.log.Warn("a Pending was garbage collected without Await, AwaitInto or Close; its work was waited for and released",
			"op", w.op, "reads", w.nReads)
	}
	if w.state == pendingQueued {
		if err := w.wait(); err != nil {
			w.b.log.Warn("the dropped Pending's work failed", "op", w.op, "err", err)
		}
	}
	if w.state == pendingSettled {
		w.collect(w.err == nil)
	}
}

// wait settles the work with one fence when it is still queued and returns
// its failure. Callers hold mu.
func (p *pendingWork) wait() error {
	if p.state != pendingQueued {
		return p.err
	}
	if err := p.b.drv.StreamSynchronize(p.lease.Stream); err != nil {
		p.fail(p.driverError("StreamSynchronize", err))
		return p.err
	}
	p.b.tel.SyncPoints.Add(1)
	p.complete()
	return p.err
}

// complete settles work whose stream finished: it reads the device time
// while the timing events are still held, drops the in-flight marks and,
// when no reads wait for collection, releases everything else. Work whose
// collectives were abandoned (an aborted communicator) fails here.
func (p *pendingWork) complete() {
	if e := p.abortErr.Load(); e != nil {
		p.err = e // its collectives were abandoned: the results are undefined
	} else if e := abortedUnder(p.op, p.comms); e != nil {
		p.err = e
	}
	if p.timing {
		d, err := p.b.drv.EventElapsed(p.lease.Start, p.lease.End)
		if err != nil {
			p.timeErr = driverError("Pending.DeviceTime", "EventElapsed", err)
		}
		p.devTime = d
	}
	p.settle()
	if p.rd == nil || p.err != nil { // a failure's reads are never delivered
		p.collect(true)
	}
}

// fail settles work whose fence or query failed: whatever was queued is
// drained so no copy still uses the staging, and everything is released,
// the lease unhealthy. When the drain fails, the lease, the staging and an
// in-flight reference on the bound buffers go to the Backend's quarantine
// instead (quarantine.go).
func (p *pendingWork) fail(err *Error) {
	p.err = err
	if p.graph != nil {
		p.graph.Failed(p.op, p.lease) // aborts the graph's comms first
	} else {
		abortComms(p.comms) // before the drain: a part may wait for the other ranks
		h := held{St: []*hostmem.Staging{&p.up}, Bufs: p.ents, Dev: p.xfer.DevStaging(), Discard: true}
		if p.xfer != nil {
			// The direct copies' pinned regions stay in use while the
			// quarantined stream may still run them.
			h.RegionsOf = &p.xfer.Regions
		}
		if p.rd != nil {
			h.St = append(h.St, p.rd.Staging())
		}
		if st := p.xfer.LandingStaging(); st != nil {
			h.St = append(h.St, st) // a read landing after the work (landRead)
		}
		p.b.xfer.SyncOrQuarantine(p.op, h, p.lease)
	}
	p.lease = nil
	p.settle()
	p.collect(false)
}

// settle drops the in-flight marks and the uses of the Comms.
func (p *pendingWork) settle() {
	if p.ents != nil {
		p.b.store.unpinEntries(p.op, p.ents)
		p.ents = nil
	}
	if p.commUses {
		useComms(p.comms, -1)
		p.commUses = false
	}
	p.state = pendingSettled
}

// collect releases the staging and the lease.
func (p *pendingWork) collect(healthy bool) {
	p.up.ReturnAll()
	p.b.xfer.ReleaseBatch(p.xfer)
	p.xfer = nil
	if p.rd != nil {
		p.rd.Release()
		p.rd = nil
	}
	if p.lease != nil {
		p.b.launch.Return(p.lease, healthy)
		p.lease = nil
	}
	if p.graph != nil {
		p.graph.Collected() // the graph's staging is free for the next replay
		p.graph = nil
	}
	p.state = pendingCollected
}

// fillReads returns the n reads of finished work in dst's slots,
// append-style: slot i is into[i] where the work was given a destination
// at submission (its bytes landed there, or are copied there from the
// staging now), else rd's bytes appended to dst's i-th slice.
func fillReads(rd *transfer.Read, dst, into [][]byte, n int) [][]byte {
	if rd == nil {
		out := transfer.GrowSlots(dst, n)
		for i := range out {
			out[i] = out[i][:0]
		}
		return out
	}
	if into == nil {
		return rd.Fill(dst)
	}
	out := transfer.GrowSlots(dst, n)
	for i, d := range into {
		if d != nil {
			out[i] = d[:0]
		}
	}
	out = rd.Fill(out)
	for i, d := range into {
		if d != nil {
			out[i] = d
		}
	}
	return out
}
