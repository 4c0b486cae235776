package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

var (
	_ driver.CollectiveDriver = (*Device)(nil)
	_ driver.ContextJoiner    = (*Device)(nil)
)

// clique is the shared state of one communicator: its ranks and the
// collective calls they have queued, matched by sequence number (rank r's
// k-th call meets every other rank's k-th call, as in NCCL).
type clique struct {
	ranks []*comm
	next  []uint64 // per rank: the sequence number of its next call
	calls map[uint64]*collCall
	// grouped: the ranks live in one process and are driven by one
	// goroutine (NewCommunicators), so their calls must sit between
	// GroupStart and GroupEnd, as NCCL requires.
	grouped bool
	// aborted: a rank called Abort; queued parts execute as no-ops and new
	// calls fail.
	aborted bool
}

// collCall is one collective call across the ranks of a clique.
type collCall struct {
	kind  Op
	count uint64
	dt    driver.DataType
	red   driver.ReduceOp
	root  int
	parts []*collPart // per rank; nil until that rank queued it
	done  bool
	// visiting is set while ready works out whether the call can run.
	visiting bool
}

// collPart is one rank's share of a collCall.
type collPart struct {
	dev        *Device
	st         *stream
	op         *op
	send, recv uint64
}

// comm is one rank of a clique: a driver.Communicator.
type comm struct {
	dev       *Device
	cl        *clique
	rank      int
	destroyed bool
}

// NewCommunicators builds one communicator per device in drivers (rank i on
// drivers[i]); every driver must be a distinct device of d's Machine, d one
// of them. Collective calls of such communicators must be issued between
// GroupStart and GroupEnd when there is more than one rank.
func (d *Device) NewCommunicators(drivers []driver.Driver) ([]driver.Communicator, error) {
	const o = OpNewCommunicators
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return nil, err
	}
	if len(drivers) == 0 {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "no drivers")
	}
	devs := make([]*Device, len(drivers))
	seen := make(map[*Device]bool, len(drivers))
	self := false
	for i, drv := range drivers {
		p, err := d.peerOf(o, drv)
		if err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "driver %d repeats device %d; one rank per device", i, p.index)
		}
		seen[p], devs[i] = true, p
		self = self || p == d
	}
	if !self {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "the receiving device is not one of the drivers")
	}
	cl := newClique(len(devs), true)
	out := make([]driver.Communicator, len(devs))
	for i, p := range devs {
		out[i] = cl.add(p, i)
	}
	return out, nil
}

func newClique(n int, grouped bool) *clique {
	return &clique{ranks: make([]*comm, n), next: make([]uint64, n), calls: make(map[uint64]*collCall), grouped: grouped}
}

// add creates rank r on p; the Machine lock is held.
func (cl *clique) add(p *Device, r int) *comm {
	c := &comm{dev: p, cl: cl, rank: r}
	cl.ranks[r] = c
	if p.comms == nil {
		p.comms = make(map[*comm]struct{})
	}
	p.comms[c] = struct{}{}
	return c
}

// joins holds the communicators being joined with JoinCommunicator, by id.
var joins = struct {
	sync.Mutex
	cond    *sync.Cond
	pending map[driver.CommID]*joining
	next    uint64
}{pending: make(map[driver.CommID]*joining)}

func init() { joins.cond = sync.NewCond(&joins.Mutex) }

type joining struct {
	machine *Machine
	cl      *clique
	devs    []*Device
	joined  int
}

// NewCommID returns a fresh communicator id.
func (d *Device) NewCommID() (driver.CommID, error) {
	const o = OpNewCommID
	d.mu.Lock()
	done, err := d.admit(o)
	d.mu.Unlock()
	if done {
		return driver.CommID{}, err
	}
	var id driver.CommID
	copy(id[:], "vyrecuda-sim-comm")
	joins.Lock()
	joins.next++
	binary.LittleEndian.PutUint64(id[32:], joins.next)
	joins.Unlock()
	return id, nil
}

// JoinCommunicator joins d as rank of the nranks communicator id and blocks
// until every rank has joined, as ncclCommInitRank does (a rank that never
// joins blocks the others forever). All ranks must be devices of one
// Machine; they may call from different goroutines, and their collective
// calls need no GroupStart.
func (d *Device) JoinCommunicator(id driver.CommID, nranks, rank int) (driver.Communicator, error) {
	return d.JoinCommunicatorContext(context.Background(), id, nranks, rank)
}

// JoinCommunicatorContext is JoinCommunicator that stops waiting for the
// other ranks when ctx is done: d then leaves the communicator as if it had
// never joined (it may join again) and the error wraps ctx.Err(). Once
// every rank has joined, the join succeeds whatever ctx says.
func (d *Device) JoinCommunicatorContext(ctx context.Context, id driver.CommID, nranks, rank int) (driver.Communicator, error) {
	const o = OpJoinCommunicator
	d.mu.Lock()
	done, err := d.admit(o)
	d.mu.Unlock()
	if done {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "rank %d of %d ranks", rank, nranks)
	}
	joins.Lock()
	defer joins.Unlock()
	j := joins.pending[id]
	if j == nil {
		j = &joining{machine: d.machine, cl: newClique(nranks, false), devs: make([]*Device, nranks)}
		joins.pending[id] = j
	}
	switch {
	case j.machine != d.machine:
		return nil, fail(o, cudaInvalidDevice, "rank %d is on another Machine than the ranks that joined first", rank)
	case len(j.devs) != nranks:
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "%d ranks, but the first rank said %d", nranks, len(j.devs))
	case j.devs[rank] != nil:
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "rank %d joined already", rank)
	}
	for _, p := range j.devs {
		if p == d {
			return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "device %d joined already as another rank", d.index)
		}
	}
	j.devs[rank] = d
	d.mu.Lock()
	c := j.cl.add(d, rank)
	d.mu.Unlock()
	j.joined++
	if j.joined == nranks {
		delete(joins.pending, id)
		joins.cond.Broadcast()
	}
	if j.joined < nranks && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			joins.Lock()
			joins.cond.Broadcast()
			joins.Unlock()
		})
		defer stop()
	}
	for j.joined < nranks {
		if err := ctx.Err(); err != nil {
			joined := j.joined
			j.leave(id, d, c)
			return nil, fmt.Errorf("sim: %s: rank %d stopped waiting with %d of %d ranks joined: %w", o, rank, joined, nranks, err)
		}
		joins.cond.Wait()
	}
	return c, nil
}

// leave undoes rank c's join of j (id's), whose other ranks have not all
// joined; joins' lock is held.
func (j *joining) leave(id driver.CommID, d *Device, c *comm) {
	j.devs[c.rank] = nil
	j.cl.ranks[c.rank] = nil
	j.joined--
	d.mu.Lock()
	delete(d.comms, c)
	d.mu.Unlock()
	if j.joined == 0 {
		delete(joins.pending, id)
	}
}

// GroupStart opens a group of collective calls (see NewCommunicators).
// Groups nest; the Machine keeps one depth for all goroutines.
func (d *Device) GroupStart() error {
	const o = OpGroupStart
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	d.machine.group++
	return nil
}

// GroupEnd closes the group GroupStart opened; without one it fails with
// CUDA_ERROR_ILLEGAL_STATE.
func (d *Device) GroupEnd() error {
	const o = OpGroupEnd
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if d.machine.group == 0 {
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "GroupEnd without GroupStart")
	}
	d.machine.group--
	return nil
}

// Rank returns the communicator's rank.
func (c *comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *comm) Size() int { return len(c.cl.ranks) }

// AllReduce queues rank c's part of an all-reduce.
func (c *comm) AllReduce(send, recv uint64, count uint64, dt driver.DataType, op driver.ReduceOp, s driver.Stream) error {
	return c.queue(OpAllReduce, send, recv, count, count, dt, op, 0, s)
}

// Broadcast queues rank c's part of a broadcast from root; send is read on
// root only.
func (c *comm) Broadcast(send, recv uint64, count uint64, dt driver.DataType, root int, s driver.Stream) error {
	return c.queue(OpBroadcast, send, recv, count, count, dt, driver.ReduceSum, root, s)
}

// AllGather queues rank c's part of an all-gather.
func (c *comm) AllGather(send, recv uint64, count uint64, dt driver.DataType, s driver.Stream) error {
	return c.queue(OpAllGather, send, recv, count, count*uint64(c.Size()), dt, driver.ReduceSum, 0, s)
}

// ReduceScatter queues rank c's part of a reduce-scatter.
func (c *comm) ReduceScatter(send, recv uint64, count uint64, dt driver.DataType, op driver.ReduceOp, s driver.Stream) error {
	return c.queue(OpReduceScatter, send, recv, count*uint64(c.Size()), count, dt, op, 0, s)
}

// Destroy releases the rank; a second Destroy (or Abort) fails with
// CUDA_ERROR_INVALID_HANDLE.
func (c *comm) Destroy() error { return c.release(false) }

// Abort releases the rank and abandons every rank's queued calls: the parts
// of ranks that aborted execute as no-ops, those of the others fail, and new
// calls on the other ranks fail.
func (c *comm) Abort() error { return c.release(true) }

func (c *comm) release(abort bool) error {
	const o = OpCommDestroy
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if c.destroyed {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "communicator rank %d was destroyed already", c.rank)
	}
	c.destroyed = true
	delete(d.comms, c)
	if abort {
		c.cl.aborted = true
		d.machine.cond.Broadcast()
	}
	return nil
}
