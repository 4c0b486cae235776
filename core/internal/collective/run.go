package collective

import (
	"context"
	"fmt"
	"strings"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// Call is one collective call over the parts this process drives.
type Call struct {
	Op    string
	Args  Args
	Parts []*Part
	// Group, when set, brackets the queueing with its GroupStart and
	// GroupEnd (one goroutine driving several ranks).
	Group driver.CollectiveDriver
	// Abort abandons the call's communicators (see Run).
	Abort func()
	// Agree, when set, compares the call with the ranks of other
	// processes. Run calls it once, before anything is queued: after every
	// part was checked, pinned and leased (local nil, count the elements
	// per rank block), or after that failed (local the failure, so the
	// other ranks learn of it; Run then returns local). A non-nil result
	// fails the call with everything given back and nothing queued.
	Agree func(count uint64, local error) error
}

// Run checks every part's shape and that all parts agree on the element
// count (before anything is pinned), pins each part's buffers and leases
// its stream (giving everything back when one fails), runs Agree, then
// queues every rank's part and waits for each rank's stream: one fence per
// device, or, when ctx can be done, polls until the streams finish or ctx
// is done.
//
// On a failure every stream is drained and everything released; when some
// part was queued, or ranks outside this call exist (a.Ranks >
// len(parts)), Abort is called first, since their parts would otherwise
// wait forever for the ones that were not queued. A ctx done before the
// call queues nothing (aborting for ranks outside the call); a ctx done
// while waiting aborts, drains and releases, and either returns an
// ErrInFlight wrapping ctx.Err(). Run expects a.Check to have passed.
func Run(ctx context.Context, c *Call) error {
	op, a, parts := c.Op, &c.Args, c.Parts
	if ctx != nil && ctx.Err() != nil {
		aborted := a.Ranks > len(parts)
		if aborted {
			c.Abort()
		}
		return Cancelled(op, ctx.Err(), false, aborted)
	}
	count, err := CheckRanks(op, a, parts)
	if err == nil {
		err = prepare(op, a, parts)
	}
	if c.Agree != nil {
		if aerr := c.Agree(count, err); err == nil && aerr != nil {
			release(op, parts, false)
			return aerr
		}
	}
	if err != nil {
		return err
	}
	if err := c.queue(count); err != nil {
		return err
	}
	return c.wait(ctx)
}

// prepare pins each part's buffers and leases a stream per rank. On
// failure everything taken, the failing part's included, is given back.
func prepare(op string, a *Args, parts []*Part) error {
	for i, c := range parts {
		var err error
		c.recvPtr, c.sendPtr, err = c.Pin(op, a.NeedsSend(c.Rank))
		c.pinned = err == nil
		if err == nil {
			c.lease, err = c.Pool.Lease(op, false)
		}
		if err != nil {
			release(op, parts[:i+1], false)
			return err
		}
	}
	return nil
}

// release gives back every part's lease and pins (see Part.release).
func release(op string, parts []*Part, failed bool) {
	for _, c := range parts {
		c.release(op, failed)
	}
}

// release gives back the rank's lease (after a failure: draining its
// stream first, or quarantining it with what Hold names) and unpins its
// buffers.
func (c *Part) release(op string, failed bool) {
	if c.lease != nil {
		if failed {
			var hold func() streams.Hold
			if c.Hold != nil {
				hold = func() streams.Hold { return c.Hold(op) }
			}
			c.Pool.SyncOrQuarantine(op, true, hold, c.lease)
		} else {
			c.Pool.Return(c.lease, true)
		}
		c.lease = nil
	}
	if c.pinned {
		c.Unpin(op)
		c.pinned = false
	}
}

// queue queues every part (between GroupStart and GroupEnd when c.Group
// is set), count elements per rank block. On failure it aborts where a
// part may wait forever, releases everything and returns the error.
func (c *Call) queue(count uint64) error {
	op, a := c.Op, &c.Args
	if c.Group != nil {
		if err := c.Group.GroupStart(); err != nil {
			release(op, c.Parts, true)
			return errs.Driver(op, "GroupStart", err)
		}
	}
	var qerr error
	queued := 0
	for _, p := range c.Parts {
		if err := a.queue(p, count); err != nil {
			e := errs.Driver(op, a.Kind.String(), err)
			e.Detail = fmt.Sprintf("rank %d: %s", p.Rank, e.Detail)
			qerr = e
			break
		}
		queued++
	}
	if c.Group != nil {
		if err := c.Group.GroupEnd(); err != nil && qerr == nil {
			qerr = errs.Driver(op, "GroupEnd", err)
		}
	}
	if qerr != nil {
		// Ranks outside this call (other processes) wait for the part that
		// failed as much as queued parts of this call do.
		if queued > 0 || a.Ranks > len(c.Parts) {
			c.Abort()
		}
		release(op, c.Parts, true)
		return qerr
	}
	return nil
}

// queue queues the rank's part on its leased stream.
func (a *Args) queue(c *Part, count uint64) error {
	return a.Queue(c.Communicator, c.sendPtr, c.recvPtr, count, c.lease.Stream)
}

// Queue queues one rank's part of the call on s through comm: count
// elements per rank block, from send into recv (send is not read by a
// broadcast's other ranks). It checks nothing: the caller checked the
// arguments (Check, Shape) and pinned the buffers.
func (a *Args) Queue(comm driver.Communicator, send, recv, count uint64, s driver.Stream) error {
	switch a.Kind {
	case AllReduce:
		return comm.AllReduce(send, recv, count, a.DT, a.Red, s)
	case Broadcast:
		return comm.Broadcast(send, recv, count, a.DT, a.Root, s)
	case AllGather:
		return comm.AllGather(send, recv, count, a.DT, s)
	}
	return comm.ReduceScatter(send, recv, count, a.DT, a.Red, s)
}

// wait waits for every part's stream (streams.Wait) and releases
// everything. A failure, or ctx done first, aborts the communicators and
// drains every stream before it returns.
func (c *Call) wait(ctx context.Context) error {
	for _, p := range c.Parts {
		err := streams.Wait(ctx, p.Drv, p.lease.Stream)
		if err == nil {
			if p.Fenced != nil {
				p.Fenced()
			}
			continue
		}
		c.Abort()
		release(c.Op, c.Parts, true)
		if ctx != nil && ctx.Err() != nil && err == ctx.Err() {
			return Cancelled(c.Op, err, true, true)
		}
		e := errs.Driver(c.Op, "StreamSynchronize", err)
		e.Detail = fmt.Sprintf("rank %d: %s", p.Rank, e.Detail)
		return e
	}
	release(c.Op, c.Parts, false)
	return nil
}

// Cancelled is the ErrInFlight, wrapping cause (the context's error), of
// a call whose context was done: before anything was queued, or while it
// waited (queued); aborted says whether the communicators were aborted.
func Cancelled(op string, cause error, queued, aborted bool) *errs.Error {
	var b strings.Builder
	if queued {
		b.WriteString("stopped waiting when the context was done; the call was abandoned: its streams were drained and its buffers released, and its recv buffers hold undefined bytes")
	} else {
		b.WriteString("the context was done before the call; nothing was queued")
	}
	if aborted {
		b.WriteString("; the communicator was aborted so that no rank waits for this call")
	}
	return &errs.Error{Op: op, Kind: errs.KindInFlight, Detail: b.String(), Err: cause,
		Fix: "give the call a live context with enough time; after an abort, a Group builds new communicators on its next collective and a Comm must be joined again on every rank"}
}
