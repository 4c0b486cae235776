package core

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// Comm is one rank of a communicator that ranks in several processes or
// hosts join (JoinComm), bound to one Backend. Its collectives run on that
// Backend's buffers and wait for their own rank's part with one fence; the
// call returns once every rank has taken part. A Comm is safe for
// concurrent use; its calls run one at a time.
//
// No rank sees the others' arguments, so ranks whose calls differ (another
// collective, element count, type, reduction or root) would hang or
// corrupt memory on NCCL. With WithCollectiveChecks on the Backend, or
// VYRECUDA_COLLECTIVE_CHECKS=1 in the environment, every rank first
// exchanges a description of its call and all of them fail alike with
// ErrInvalidArgument when they differ.
//
// A Comm's collectives may also run as steps of a Batch on its Backend
// (Step.Collective), ordered with the batch's other work; see Batch.
type Comm struct {
	b *Backend

	rank, size int

	// mu serializes calls (ranks must issue them in one order): a
	// collective holds it to its end, a batch or Capture while it checks
	// and queues its collective steps.
	mu sync.Mutex
	// state guards c, closed and uses. It is held while a call queues on
	// c, and to abort or destroy c, so an abort on another goroutine (a
	// batch's failed fence) never frees c under a call; never across a
	// fence.
	state  sync.Mutex
	c      Communicator // nil once aborted after a failure
	closed bool
	uses   int         // open Graphs and unsettled batch work whose collective steps use the Comm
	chk    *commChecks // nil unless collective checks are on
	set    *commSet    // the Group communicator this rank belongs to (Group.Comm), or nil
}

// noCollectivesFix is the Fix of a Backend whose driver has no collectives.
const noCollectivesFix = "open the Backend with OpenCUDA (NCCL) or over a simulated device"

// NewCommID creates the identifier of a new communicator on b's driver. One
// rank creates it and hands it to the others by its own means (a file, a
// key-value store, MPI); each rank, b's included, then calls JoinComm.
func (b *Backend) NewCommID() (CommID, error) {
	const op = "NewCommID"
	if b == nil {
		return CommID{}, newError(op, KindInvalidArgument, "the Backend is nil", "call it on an open Backend")
	}
	if err := b.enter(op); err != nil {
		return CommID{}, err
	}
	defer b.exit()
	cd, err := collective.Of(op, b.drv, noCollectivesFix)
	if err != nil {
		return CommID{}, err
	}
	id, err := cd.NewCommID()
	if err != nil {
		return CommID{}, collective.CommError(op, "NewCommID", err)
	}
	return id, nil
}

// JoinComm joins b's device as rank (0 to nranks-1) of the communicator
// id, and returns once all nranks ranks have joined: each rank must call
// it, from its own process or goroutine. Close the Comm before b: its
// calls go through b's driver.
func (b *Backend) JoinComm(id CommID, nranks, rank int) (*Comm, error) {
	return b.joinComm(context.Background(), "JoinComm", id, nranks, rank)
}

// JoinCommContext is JoinComm that stops waiting for the other ranks when
// ctx is done, with an ErrInFlight that wraps ctx.Err(); this rank is then
// not part of the communicator. A driver that cannot give up a join (the
// NCCL bindings here have no non-blocking initialization) keeps joining in
// the background until the missing ranks arrive, and aborts the
// communicator it then gets.
func (b *Backend) JoinCommContext(ctx context.Context, id CommID, nranks, rank int) (*Comm, error) {
	return b.joinComm(ctx, "JoinCommContext", id, nranks, rank)
}

func (b *Backend) joinComm(ctx context.Context, op string, id CommID, nranks, rank int) (*Comm, error) {
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "the Backend is nil", "call it on an open Backend")
	}
	if ctx == nil {
		return nil, nilContext(op)
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("rank %d of %d ranks", rank, nranks),
			"pass nranks >= 1 and a rank from 0 to nranks-1")
	}
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	cd, err := collective.Of(op, b.drv, noCollectivesFix)
	if err != nil {
		return nil, err
	}
	c, err := collective.Join(ctx, op, cd, id, nranks, rank)
	if err != nil {
		return nil, err
	}
	comm := &Comm{b: b, c: c, rank: rank, size: nranks}
	if b.cfg.collChecks || collectiveChecksEnv(b.log) {
		if comm.chk, err = newCommChecks(op, b, nranks); err != nil {
			// The other ranks would wait for this one's first exchange.
			if aerr := c.Abort(); aerr != nil {
				b.log.Error("aborting a communicator after a failed join failed", "err", aerr)
			}
			return nil, err
		}
	}
	return comm, nil
}

// Rank returns the communicator rank of c's Backend (-1 for a nil Comm).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size returns the number of ranks (0 for a nil Comm).
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// AllReduce is this rank's part of an all-reduce (see Group.AllReduce).
func (c *Comm) AllReduce(send, recv Buffer, dt DataType, red ReduceOp) error {
	return c.run(context.Background(), "Comm.AllReduce", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// AllReduceContext is AllReduce that stops waiting when ctx is done,
// aborting the communicator (see Collectives with a context.Context).
func (c *Comm) AllReduceContext(ctx context.Context, send, recv Buffer, dt DataType, red ReduceOp) error {
	return c.run(ctx, "Comm.AllReduceContext", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// Broadcast is this rank's part of a broadcast from root; send is read on
// root only (other ranks may pass the zero Buffer).
func (c *Comm) Broadcast(root int, send, recv Buffer, dt DataType) error {
	return c.run(context.Background(), "Comm.Broadcast", collective.Args{Kind: collective.Broadcast, DT: dt, Root: root}, send, recv)
}

// BroadcastContext is Broadcast that stops waiting when ctx is done,
// aborting the communicator.
func (c *Comm) BroadcastContext(ctx context.Context, root int, send, recv Buffer, dt DataType) error {
	return c.run(ctx, "Comm.BroadcastContext", collective.Args{Kind: collective.Broadcast, DT: dt, Root: root}, send, recv)
}

// AllGather is this rank's part of an all-gather (see Group.AllGather).
func (c *Comm) AllGather(send, recv Buffer, dt DataType) error {
	return c.run(context.Background(), "Comm.AllGather", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// AllGatherContext is AllGather that stops waiting when ctx is done,
// aborting the communicator.
func (c *Comm) AllGatherContext(ctx context.Context, send, recv Buffer, dt DataType) error {
	return c.run(ctx, "Comm.AllGatherContext", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// ReduceScatter is this rank's part of a reduce-scatter (see
// Group.ReduceScatter).
func (c *Comm) ReduceScatter(send, recv Buffer, dt DataType, red ReduceOp) error {
	return c.run(context.Background(), "Comm.ReduceScatter", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

// ReduceScatterContext is ReduceScatter that stops waiting when ctx is
// done, aborting the communicator.
func (c *Comm) ReduceScatterContext(ctx context.Context, send, recv Buffer, dt DataType, red ReduceOp) error {
	return c.run(ctx, "Comm.ReduceScatterContext", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

// abortedComm is the error of a call on a Comm aborted after a failure.
func abortedComm(op string) *Error {
	return newError(op, KindClosed, "the communicator was aborted after an earlier collective failed or gave up waiting",
		"join a new communicator (every rank must)")
}

func (c *Comm) run(ctx context.Context, op string, a collective.Args, send, recv Buffer) error {
	if c == nil {
		return newError(op, KindInvalidArgument, "the Comm is nil", "join one with Backend.JoinComm")
	}
	if ctx == nil {
		return nilContext(op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(op); err != nil {
		return err
	}
	a.Ranks = c.size
	bad := a.Check(op)
	if bad != nil && c.chk == nil {
		return bad
	}
	if err := c.b.enter(op); err != nil {
		return err
	}
	defer c.b.exit()
	if err := c.usable(op); err != nil {
		return err
	}
	r := &rankBufs{b: c.b, rank: c.rank, send: send, recv: recv}
	call := &collective.Call{Op: op, Args: a, Parts: []*collective.Part{r.part(queueComm{c})}, Abort: c.abort}
	if c.chk != nil {
		call.Agree = func(count uint64, local error) error { return c.agree(ctx, op, &a, count, local) }
		if bad != nil {
			_ = call.Agree(0, bad) // the other ranks learn of it; bad says more
			return bad
		}
	}
	if err := collective.Run(ctx, call); err != nil {
		return err
	}
	if e := abortedUnder(op, []*Comm{c}); e != nil {
		return e // aborted by another call (or rank of Group.Comm) while this one waited
	}
	return nil
}

// usable refuses a closed Comm (ErrClosed) and an aborted one.
func (c *Comm) usable(op string) error {
	c.state.Lock()
	defer c.state.Unlock()
	if c.closed {
		return newError(op, KindClosed, "the Comm is closed", "join a new communicator")
	}
	if c.c == nil {
		return abortedComm(op)
	}
	return nil
}

// abort abandons the communicator after a failure, and, for a rank of a
// Group communicator (Group.Comm), the other ranks' too: they live in this
// process and would otherwise wait for this one.
func (c *Comm) abort() {
	c.abortOwn()
	if c.set != nil {
		c.set.abortOthers(c)
	}
}

// abortOwn aborts c's own communicator, once.
func (c *Comm) abortOwn() {
	c.state.Lock()
	defer c.state.Unlock()
	if c.c == nil {
		return
	}
	if err := c.c.Abort(); err != nil {
		c.b.log.Error("aborting a communicator after a failed collective failed", "err", err)
	}
	c.c = nil
}

// aborted reports whether the communicator was aborted.
func (c *Comm) aborted() bool {
	c.state.Lock()
	defer c.state.Unlock()
	return c.c == nil
}

// use adds n (1 or -1) to the Comm's uses by Graphs and batch work.
func (c *Comm) use(n int) {
	c.state.Lock()
	c.uses += n
	c.state.Unlock()
}

// Close destroys this rank's communicator (and frees what collective
// checks use). It refuses with ErrInFlight, changing nothing, while an
// open Graph or uncollected batch work (a Pending of RunAsync) has a
// collective step on the Comm. A second Close returns ErrClosed.
func (c *Comm) Close() error {
	const op = "Comm.Close"
	if c == nil {
		return newError(op, KindInvalidArgument, "the Comm is nil", "join one with Backend.JoinComm")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeLocked(op)
}

// closeLocked is Close with c.mu held.
func (c *Comm) closeLocked(op string) error {
	c.state.Lock()
	defer c.state.Unlock()
	if c.closed {
		return newError(op, KindClosed, "the Comm is closed", "close it once")
	}
	if c.uses > 0 {
		return newError(op, KindInFlight, fmt.Sprintf("%d open Graph(s) or uncollected batch(es) have collective steps on the Comm", c.uses),
			"close those Graphs, and collect those Pendings (Await, AwaitInto or Close), before closing the Comm")
	}
	c.closed = true
	c.chk.free(op, c.b)
	if c.c == nil {
		return nil // aborted already
	}
	if err := c.c.Destroy(); err != nil {
		return driverError(op, "Destroy", err)
	}
	return nil
}

// errCommAborted is what a queue on an aborted Comm's communicator meets.
var errCommAborted = errors.New("the communicator was aborted")

// queueComm is a Comm's communicator as package collective queues on it:
// each call runs under the Comm's state lock, on the communicator the Comm
// holds then (and fails once it was aborted).
type queueComm struct{ c *Comm }

func (q queueComm) with(fn func(Communicator) error) error {
	q.c.state.Lock()
	defer q.c.state.Unlock()
	if q.c.c == nil {
		return errCommAborted
	}
	return fn(q.c.c)
}

func (q queueComm) Rank() int { return q.c.rank }
func (q queueComm) Size() int { return q.c.size }

func (q queueComm) AllReduce(send, recv uint64, count uint64, dt DataType, red ReduceOp, s Stream) error {
	return q.with(func(c Communicator) error { return c.AllReduce(send, recv, count, dt, red, s) })
}

func (q queueComm) Broadcast(send, recv uint64, count uint64, dt DataType, root int, s Stream) error {
	return q.with(func(c Communicator) error { return c.Broadcast(send, recv, count, dt, root, s) })
}

func (q queueComm) AllGather(send, recv uint64, count uint64, dt DataType, s Stream) error {
	return q.with(func(c Communicator) error { return c.AllGather(send, recv, count, dt, s) })
}

func (q queueComm) ReduceScatter(send, recv uint64, count uint64, dt DataType, red ReduceOp, s Stream) error {
	return q.with(func(c Communicator) error { return c.ReduceScatter(send, recv, count, dt, red, s) })
}

// Destroy and Abort are the Comm's: package collective calls neither.
func (q queueComm) Destroy() error {
	return errors.New("a Comm's communicator is destroyed by Comm.Close")
}
func (q queueComm) Abort() error {
	q.c.abort()
	return nil
}
