package core

import (
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// AllReduce reduces, element by element with red, the buffers send[i] (one
// per Backend of the group, in order: rank i) and writes the result into
// every recv[i]; send[i] may be recv[i] (in place). All buffers have the
// same length, in whole elements of dt. It waits for the result with one
// fence per device. The first collective of a group builds its
// communicators (NCCL's, on real devices).
func (g *Group) AllReduce(send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run("Group.AllReduce", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// Broadcast copies root's buffer send into every recv[i] (send may be
// recv[root]); the lengths are equal.
func (g *Group) Broadcast(root int, send Buffer, recv []Buffer, dt DataType) error {
	sends := make([]Buffer, len(recv))
	if root >= 0 && root < len(sends) {
		sends[root] = send
	}
	return g.run("Group.Broadcast", collective.Args{Kind: collective.Broadcast, DT: dt, Root: root}, sends, recv)
}

// AllGather writes every send[i] into every recv[j] at byte i*len(send[i]);
// each recv holds as many bytes as all sends together.
func (g *Group) AllGather(send, recv []Buffer, dt DataType) error {
	return g.run("Group.AllGather", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// ReduceScatter reduces the send buffers element by element with red and
// writes block i of the result (len(recv[i]) bytes) into recv[i]; each send
// holds as many bytes as all recvs together.
func (g *Group) ReduceScatter(send, recv []Buffer, dt DataType, red ReduceOp) error {
	return g.run("Group.ReduceScatter", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

func (g *Group) run(op string, a collective.Args, send, recv []Buffer) error {
	if g == nil {
		return newError(op, KindInvalidArgument, "the Group is nil", "open one with OpenDevices or OpenGroup")
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
	exit, err := enterAll(op, g.bs)
	if err != nil {
		return err
	}
	defer exit()
	if err := g.buildComms(op); err != nil {
		return err
	}
	parts := make([]*collective.Part, n)
	for i, b := range g.bs {
		parts[i] = (&rankBufs{b: b, rank: i, send: send[i], recv: recv[i]}).part(g.comms[i])
	}
	var grp CollectiveDriver
	if n > 1 {
		grp = g.bs[0].drv.(CollectiveDriver)
	}
	return collective.Run(op, &a, parts, grp, g.abortComms)
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

// Comm is one rank of a communicator that ranks in several processes or
// hosts join (JoinComm), bound to one Backend. Its collectives run on that
// Backend's buffers and wait for their own rank's part with one fence; the
// call returns once every rank has taken part. A Comm is safe for
// concurrent use; its calls run one at a time.
type Comm struct {
	b *Backend

	rank, size int

	mu     sync.Mutex   // guards c and closed, and serializes calls (ranks must issue them in one order)
	c      Communicator // nil once aborted after a failure
	closed bool
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
	const op = "JoinComm"
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "the Backend is nil", "call it on an open Backend")
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
	c, err := cd.JoinCommunicator(id, nranks, rank)
	if err != nil {
		return nil, collective.CommError(op, "JoinCommunicator", err)
	}
	if c == nil {
		return nil, nullSuccess(op, "JoinCommunicator")
	}
	return &Comm{b: b, c: c, rank: rank, size: nranks}, nil
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
	return c.run("Comm.AllReduce", collective.Args{Kind: collective.AllReduce, DT: dt, Red: red}, send, recv)
}

// Broadcast is this rank's part of a broadcast from root; send is read on
// root only (other ranks may pass the zero Buffer).
func (c *Comm) Broadcast(root int, send, recv Buffer, dt DataType) error {
	return c.run("Comm.Broadcast", collective.Args{Kind: collective.Broadcast, DT: dt, Root: root}, send, recv)
}

// AllGather is this rank's part of an all-gather (see Group.AllGather).
func (c *Comm) AllGather(send, recv Buffer, dt DataType) error {
	return c.run("Comm.AllGather", collective.Args{Kind: collective.AllGather, DT: dt}, send, recv)
}

// ReduceScatter is this rank's part of a reduce-scatter (see
// Group.ReduceScatter).
func (c *Comm) ReduceScatter(send, recv Buffer, dt DataType, red ReduceOp) error {
	return c.run("Comm.ReduceScatter", collective.Args{Kind: collective.ReduceScatter, DT: dt, Red: red}, send, recv)
}

func (c *Comm) run(op string, a collective.Args, send, recv Buffer) error {
	if c == nil {
		return newError(op, KindInvalidArgument, "the Comm is nil", "join one with Backend.JoinComm")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return newError(op, KindClosed, "the Comm is closed", "join a new communicator")
	}
	if c.c == nil {
		return newError(op, KindClosed, "the communicator was aborted after an earlier collective failed",
			"join a new communicator (every rank must)")
	}
	a.Ranks = c.size
	if err := a.Check(op); err != nil {
		return err
	}
	if err := c.b.enter(op); err != nil {
		return err
	}
	defer c.b.exit()
	if c.c == nil {
		return newError(op, KindClosed, "the communicator was aborted after an earlier collective failed",
			"join a new communicator (every rank must)")
	}
	abort := func() {
		if err := c.c.Abort(); err != nil {
			c.b.log.Error("aborting a communicator after a failed collective failed", "err", err)
		}
		c.c = nil
	}
	r := &rankBufs{b: c.b, rank: c.rank, send: send, recv: recv}
	return collective.Run(op, &a, []*collective.Part{r.part(c.c)}, nil, abort)
}

// Close destroys this rank's communicator. A second Close returns ErrClosed.
func (c *Comm) Close() error {
	const op = "Comm.Close"
	if c == nil {
		return newError(op, KindInvalidArgument, "the Comm is nil", "join one with Backend.JoinComm")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return newError(op, KindClosed, "the Comm is closed", "close it once")
	}
	c.closed = true
	if c.c == nil {
		return nil // aborted already
	}
	if err := c.c.Destroy(); err != nil {
		return driverError(op, "Destroy", err)
	}
	return nil
}
