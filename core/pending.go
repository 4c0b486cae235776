package core

import (
	"fmt"
	"sync"
	"time"
)

// Pending is device work queued by RunAsync or DispatchResidentAsync and not
// yet collected. Until it completes, the buffers it binds are in flight:
// FreeResident refuses them and Backend.Close refuses with ErrInFlight.
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
type Pending struct {
	b  *Backend
	op string

	mu    sync.Mutex // guards every field below
	state pendingState
	err   error // the work's failure, once settled

	lease   *launchLease // nil once given back
	up      staging      // upload staging; released at completion
	rd      *gathered    // read staging and views; nil without reads
	nReads  int
	ents    []*residentEntry // in-flight marks; nil once dropped
	timing  bool
	graph   *Graph // the Graph this work replays, or nil
	devTime time.Duration
	timeErr error
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != pendingQueued {
		return true, p.err
	}
	done, err := p.b.drv.EventQuery(p.lease.Done)
	if err != nil {
		p.fail(driverError(p.op, "EventQuery", err))
		return true, p.err
	}
	if !done {
		return false, nil
	}
	p.complete()
	return true, p.err
}

// Await blocks until the work has finished and returns its failure, if any.
// Reads, if the work has any, stay available to AwaitInto.
func (p *Pending) Await() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wait()
}

// AwaitInto waits for the work and returns the bytes of its reads, one slot
// per Batch.Reads item in order, written into dst append-style: slot i
// reuses the capacity of dst's i-th slice and dst's own capacity is reused
// for the slots. On failure it returns dst unchanged. Reads are delivered
// once: after AwaitInto (or Close) has collected them, a further AwaitInto
// fails with ErrClosed.
func (p *Pending) AwaitInto(dst [][]byte) ([][]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.wait(); err != nil {
		return dst, err
	}
	if p.state == pendingCollected {
		if p.nReads == 0 {
			return growSlots(dst, 0), nil
		}
		return dst, newError(p.op, KindClosed,
			fmt.Sprintf("the %d read(s) of this pending work were already collected", p.nReads),
			"call AwaitInto once per Pending, and keep its result")
	}
	var out [][]byte
	if p.rd != nil {
		out = p.rd.fill(dst, 0, p.nReads)
	} else {
		out = growSlots(dst, p.nReads)
		for i := range out {
			out[i] = out[i][:0]
		}
	}
	p.collect(true)
	return out, nil
}

// Close releases everything the Pending holds, waiting for the work first if
// it has not finished. It returns the failure of that wait, if Close had to
// wait and the wait failed; otherwise nil. Uncollected reads are dropped.
// Calling it again does nothing.
func (p *Pending) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.state == pendingQueued {
		err = p.wait()
	}
	if p.state == pendingSettled {
		p.collect(p.err == nil)
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
	p.mu.Lock()
	defer p.mu.Unlock()
	const op = "Pending.DeviceTime"
	switch {
	case !p.timing:
		return 0, newError(op, KindInvalidArgument, "no dispatch of this work asked for timing",
			"set DispatchConfig.Timing on the dispatch to time")
	case p.state == pendingQueued:
		return 0, newError(op, KindInvalidArgument, "the work has not finished",
			"call Await (or wait for IsReady) before DeviceTime")
	case p.err != nil:
		return 0, p.err
	}
	return p.devTime, p.timeErr
}

// wait settles the work with one fence when it is still queued and returns
// its failure. Callers hold mu.
func (p *Pending) wait() error {
	if p.state != pendingQueued {
		return p.err
	}
	if err := p.b.drv.StreamSynchronize(p.lease.Stream); err != nil {
		p.fail(driverError(p.op, "StreamSynchronize", err))
		return p.err
	}
	p.b.tel.syncPoints.Add(1)
	p.complete()
	return p.err
}

// complete settles work that finished successfully: it reads the device
// time while the timing events are still held, drops the in-flight marks
// and, when no reads wait for collection, releases everything else.
func (p *Pending) complete() {
	if p.timing {
		d, err := p.b.drv.EventElapsed(p.lease.Start, p.lease.End)
		if err != nil {
			p.timeErr = driverError("Pending.DeviceTime", "EventElapsed", err)
		}
		p.devTime = d
	}
	p.settle()
	if p.rd == nil {
		p.collect(true)
	}
}

// fail settles work whose fence or query failed: whatever was queued is
// drained so no copy still uses the staging, and everything is released,
// the lease unhealthy. When the drain fails, the lease, the staging and an
// in-flight reference on the bound buffers go to the Backend's quarantine
// instead (quarantine.go).
func (p *Pending) fail(err *Error) {
	p.err = err
	if p.graph != nil {
		p.graph.replayFailed(p.op, p.lease)
	} else {
		h := held{st: []*staging{&p.up}, ents: p.ents, discard: true}
		if p.rd != nil {
			h.st = append(h.st, &p.rd.st)
		}
		p.b.drain(p.op, h, p.lease)
	}
	p.lease = nil
	p.settle()
	p.collect(false)
}

// settle drops the in-flight marks.
func (p *Pending) settle() {
	if p.ents != nil {
		p.b.unpinEntries(p.op, p.ents)
		p.ents = nil
	}
	p.state = pendingSettled
}

// collect releases the staging and the lease.
func (p *Pending) collect(healthy bool) {
	p.up.release()
	if p.rd != nil {
		p.rd.release()
		p.rd = nil
	}
	if p.lease != nil {
		p.b.launch.giveBack(p.lease, healthy)
		p.lease = nil
	}
	if p.graph != nil {
		p.graph.busy.Store(false) // the graph's staging is free for the next replay
		p.graph = nil
	}
	p.state = pendingCollected
}
