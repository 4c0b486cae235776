package core

import (
	"context"
	"fmt"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// Collectives with a context.Context.
//
// The …Context forms of the Group and Comm collectives stop waiting when
// ctx is done, where the blocking forms would wait for every rank as long
// as it takes. A context already done queues nothing (a Comm then aborts
// its communicator, so the ranks in other processes do not wait for this
// one). A context done while the call waits aborts the communicators
// (ncclCommAbort), so no rank waits forever, drains the call's streams and
// releases its buffers: nothing stays in flight and nothing leaks, and the
// recv buffers hold undefined bytes. Either returns an ErrInFlight that
// wraps ctx.Err() (errors.Is(err, context.DeadlineExceeded) or
// context.Canceled holds). After an abort a Group builds new communicators
// on its next collective; a Comm refuses further calls (ErrClosed) and
// every rank must join a new communicator. A nil ctx is ErrInvalidArgument;
// a context that can never be done (context.Background) waits as the
// blocking form does.

// AllReduce reduces, element by element with red, the buffers send[i] (one
// per Backend of the group, in order: rank i) and writes the result into
// every recv[i]; send[i] may be recv[i] (in place). All buffers have the
// same length, in whole elements of dt. It waits for the result with one
// fence per device. The first collective of a group builds its
// communicators (NCCL's, on real devices).
//
// Every rank's buffers are checked before anything is queued, by each
// collective's rule (here: equal lengths on every rank); ranks that
// disagree are refused with ErrInvalidArgument naming each rank's element
// count, and nothing is pinned, queued or changed.
func (g *Group) AllReduce(send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run(context.Background(), "Group.AllReduce", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// AllReduceContext is AllReduce that stops waiting when ctx is done (see
// Collectives with a context.Context above).
func (g *Group) AllReduceContext(ctx context.Context, send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run(ctx, "Group.AllReduceContext", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// Broadcast copies root's buffer send into every recv[i] (send may be
// recv[root]); the lengths are equal.
func (g *Group) Broadcast(root int, send Buffer, recv []Buffer, dt DataType) error {
	return g.broadcast(context.Background(), "Group.Broadcast", root, send, recv, dt)
}

// BroadcastContext is Broadcast that stops waiting when ctx is done.
func (g *Group) BroadcastContext(ctx context.Context, root int, send Buffer, recv []Buffer, dt DataType) error {
	return g.broadcast(ctx, "Group.BroadcastContext", root, send, recv, dt)
}

func (g *Group) broadcast(ctx context.Context, op string, root int, send Buffer, recv []Buffer, dt DataType) error {
	sends := make([]Buffer, len(recv))
	if root >= 0 && root < len(sends) {
		sends[root] = send
	}
	return g.run(ctx, op, collective.Args{Kind: collective.Broadcast, DT: dt, Root: root}, sends, recv)
}

// AllGather writes every send[i] into every recv[j] at byte i*len(send[i]);
// each recv holds as many bytes as all sends together.
func (g *Group) AllGather(send, recv []Buffer, dt DataType) error {
	return g.run(context.Background(), "Group.AllGather", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// AllGatherContext is AllGather that stops waiting when ctx is done.
func (g *Group) AllGatherContext(ctx context.Context, send, recv []Buffer, dt DataType) error {
	return g.run(ctx, "Group.AllGatherContext", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// ReduceScatter reduces the send buffers element by element with red and
// writes block i of the result (len(recv[i]) bytes) into recv[i]; each send
// holds as many bytes as all recvs together.
func (g *Group) ReduceScatter(send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run(context.Background(), "Group.ReduceScatter", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

// ReduceScatterContext is ReduceScatter that stops waiting when ctx is
// done.
func (g *Group) ReduceScatterContext(ctx context.Context, send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run(ctx, "Group.ReduceScatterContext", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

// nilContext refuses a nil context.Context.
func nilContext(op string) *Error {
	return newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
}

func (g *Group) run(ctx context.Context, op string, a collective.Args, send, recv []Buffer) error {
	if g == nil {
		return newError(op, KindInvalidArgument, "the Group is nil", "open one with OpenDevices or OpenGroup")
	}
	if ctx == nil {
		return nilContext(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return newError(op, KindClosed, "the Group is closed", "open a new Group")
	}
	n := len(g.bs)
	a.Ranks = n
	if len(send) != n || len(recv) != n {
		return newError(op, KindInvalidArgument, fmt.Sprintf("%d send and %d recv buffers for %d Backends", len(send), len(recv), n),
			"pass one send and one recv buffer per Backend of the group, in order")
	}
	if err := a.Check(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return collective.Cancelled(op, err, false, false) // before building communicators
	}
	parts := make([]*collective.Part, n)
	for i, b := range g.bs {
		parts[i] = (&rankBufs{b: b, rank: i, send: send[i], recv: recv[i]}).part(nil)
	}
	if _, err := collective.CheckRanks(op, &a, parts); err != nil {
		return err // before the first collective builds communicators
	}
	exit, err := enterAll(op, g.bs)
	if err != nil {
		return err
	}
	defer exit()
	if err := g.buildComms(op); err != nil {
		return err
	}
	for i, p := range parts {
		p.Communicator = g.comms[i]
	}
	var grp CollectiveDriver
	if n > 1 {
		grp = g.bs[0].drv.(CollectiveDriver)
	}
	return collective.Run(ctx, &collective.Call{Op: op, Args: a, Parts: parts, Group: grp, Abort: g.abortComms})
}

// abortComms abandons the communicators after a failed collective (the
// next collective builds new ones); g.mu is held.
func (g *Group) abortComms() {
	for i, c := range g.comms {
		if err := c.Abort(); err != nil {
			g.bs[i].log.Error("aborting a communicator after a failed collective failed", "rank", i, "err", err)
		}
	}
	g.comms = nil
}

// buildComms creates the group's communicators on first use; g.mu is held.
func (g *Group) buildComms(op string) error {
	if g.comms != nil {
		return nil
	}
	cd, err := collective.Of(op, g.bs[0].drv, "open the group with OpenDevices (NCCL), or over the devices of a sim.Machine")
	if err != nil {
		return err
	}
	drvs := make([]Driver, len(g.bs))
	for i, b := range g.bs {
		drvs[i] = b.drv
	}
	comms, err := collective.Build(op, cd, drvs)
	if err != nil {
		return err
	}
	g.comms = comms
	return nil
}
