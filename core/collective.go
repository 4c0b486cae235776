package core

import (
	"fmt"
	"sort"
	"unsafe"
)

// collKind is which collective a call runs.
type collKind int

const (
	collAllReduce collKind = iota
	collBroadcast
	collAllGather
	collReduceScatter
)

// collArgs is what every rank of one collective call agrees on.
type collArgs struct {
	kind  collKind
	dt    DataType
	red   ReduceOp
	root  int
	ranks int
}

// rankCall is one rank's share of a collective call.
type rankCall struct {
	b          *Backend
	c          Communicator
	send, recv Buffer
	ents       []*residentEntry
	sendPtr    uint64
	recvPtr    uint64
	count      uint64 // elements per rank block (see Communicator)
	lease      *launchLease
}

// needsSend reports whether the rank reads its send buffer (a broadcast
// reads only the root's).
func (a *collArgs) needsSend(rank int) bool { return a.kind != collBroadcast || rank == a.root }

// check validates the arguments shared by all ranks.
func (a *collArgs) check(op string) error {
	switch {
	case !a.dt.Valid():
		return newError(op, KindInvalidArgument, fmt.Sprintf("data type %d", int(a.dt)), "pass one of the core.Data* constants")
	case a.kind != collBroadcast && a.kind != collAllGather && !a.red.Valid():
		return newError(op, KindInvalidArgument, fmt.Sprintf("reduction %d", int(a.red)), "pass one of the core.Reduce* constants")
	case a.root < 0 || a.root >= a.ranks:
		return newError(op, KindInvalidArgument, fmt.Sprintf("root %d of %d ranks", a.root, a.ranks), "pass a root rank from 0 to the number of ranks minus 1")
	}
	return nil
}

// shape checks one rank's buffer lengths and returns its element count per
// block: send and recv of an all-reduce or broadcast are equal; an
// all-gather's recv holds ranks sends; a reduce-scatter's send holds ranks
// recvs.
func (a *collArgs) shape(op string, rank int, send, recv Buffer) (uint64, error) {
	size := a.dt.Size()
	if recv.Len%size != 0 || (a.needsSend(rank) && send.Len%size != 0) {
		return 0, newError(op, KindInvalidArgument,
			fmt.Sprintf("rank %d: send %d bytes, recv %d bytes are not whole %s elements (%d bytes each)", rank, send.Len, recv.Len, a.dt, size),
			"size the buffers in whole elements of the data type")
	}
	want, block := recv.Len, recv.Len
	switch a.kind {
	case collAllGather:
		want, block = recv.Len/a.ranks, recv.Len/a.ranks
		if recv.Len%a.ranks != 0 {
			want = -1
		}
	case collReduceScatter:
		want = recv.Len * a.ranks
	}
	if a.needsSend(rank) && send.Len != want {
		return 0, newError(op, KindInvalidArgument,
			fmt.Sprintf("rank %d: send has %d bytes and recv %d bytes, which does not fit %d ranks", rank, send.Len, recv.Len, a.ranks),
			"make send and recv equal for AllReduce and Broadcast, recv = ranks x send for AllGather, send = ranks x recv for ReduceScatter")
	}
	return uint64(block / size), nil
}

// enterAll enters every distinct Backend in address order (see enterPair).
func enterAll(op string, bs []*Backend) (func(), error) {
	order := append([]*Backend(nil), bs...)
	sort.Slice(order, func(i, j int) bool {
		return uintptr(unsafe.Pointer(order[i])) < uintptr(unsafe.Pointer(order[j]))
	})
	var entered []*Backend
	exit := func() {
		for i := len(entered) - 1; i >= 0; i-- {
			entered[i].exit()
		}
	}
	for i, b := range order {
		if i > 0 && b == order[i-1] {
			continue
		}
		if err := b.enter(op); err != nil {
			exit()
			return nil, err
		}
		entered = append(entered, b)
	}
	return exit, nil
}

// prepare pins each rank's buffers, checks their shapes and leases a stream
// per rank. On failure everything taken is given back.
func prepare(op string, a *collArgs, calls []*rankCall) error {
	undo := func(k int) {
		for _, c := range calls[:k] {
			c.b.unpinEntries(op, c.ents)
			c.ents = nil
			if c.lease != nil {
				c.b.launch.giveBack(c.lease, true)
				c.lease = nil
			}
		}
	}
	for r, c := range calls {
		count, err := a.shape(op, r, c.send, c.recv)
		if err != nil {
			undo(r)
			return err
		}
		bufs := []Buffer{c.recv}
		if a.needsSend(r) {
			bufs = append(bufs, c.send)
		}
		label := func(i int) string { return fmt.Sprintf("rank %d %s: ", r, [2]string{"recv", "send"}[i]) }
		if c.ents, err = c.b.pinEntries(op, bufs, label); err != nil {
			undo(r)
			return err
		}
		if c.ents[0].static.Load() {
			// A static upload set's buffers are immutable.
			undo(r + 1)
			e := staticWrite(op, c.recv)
			e.Detail = label(0) + e.Detail
			return e
		}
		c.count, c.recvPtr, c.sendPtr = count, c.ents[0].ptr, c.ents[0].ptr
		if len(c.ents) > 1 {
			c.sendPtr = c.ents[1].ptr
		}
		if c.lease, err = c.b.lease(op, false); err != nil {
			undo(r + 1)
			return err
		}
	}
	return nil
}

// queueRank queues one rank's part on its leased stream.
func (a *collArgs) queueRank(c *rankCall) error {
	s := c.lease.Stream
	switch a.kind {
	case collAllReduce:
		return c.c.AllReduce(c.sendPtr, c.recvPtr, c.count, a.dt, a.red, s)
	case collBroadcast:
		return c.c.Broadcast(c.sendPtr, c.recvPtr, c.count, a.dt, a.root, s)
	case collAllGather:
		return c.c.AllGather(c.sendPtr, c.recvPtr, c.count, a.dt, s)
	}
	return c.c.ReduceScatter(c.sendPtr, c.recvPtr, c.count, a.dt, a.red, s)
}

var collNames = [...]string{collAllReduce: "AllReduce", collBroadcast: "Broadcast", collAllGather: "AllGather", collReduceScatter: "ReduceScatter"}

// runCollective queues every rank's part (between GroupStart and GroupEnd
// of grp when grp is not nil) and waits for each rank's stream: one fence
// per device. On failure every stream is drained and everything released;
// when some part was queued, or ranks outside this call exist, abort is
// called first, since their parts would otherwise wait forever for the
// ones that were not queued.
func runCollective(op string, a *collArgs, calls []*rankCall, grp CollectiveDriver, abort func()) error {
	if err := prepare(op, a, calls); err != nil {
		return err
	}
	finish := func(failed bool) {
		for _, c := range calls {
			if failed {
				c.b.drain(op, held{ents: c.ents, discard: true}, c.lease)
			} else {
				c.b.launch.giveBack(c.lease, true)
			}
			c.b.unpinEntries(op, c.ents)
			c.lease, c.ents = nil, nil
		}
	}
	if grp != nil {
		if err := grp.GroupStart(); err != nil {
			finish(true)
			return driverError(op, "GroupStart", err)
		}
	}
	var qerr error
	queued := 0
	for r, c := range calls {
		if err := a.queueRank(c); err != nil {
			e := driverError(op, collNames[a.kind], err)
			e.Detail = fmt.Sprintf("rank %d: %s", r, e.Detail)
			qerr = e
			break
		}
		queued++
	}
	if grp != nil {
		if err := grp.GroupEnd(); err != nil && qerr == nil {
			qerr = driverError(op, "GroupEnd", err)
		}
	}
	if qerr != nil {
		// Ranks outside this call (other processes) wait for the part that
		// failed as much as queued parts of this call do.
		if queued > 0 || a.ranks > len(calls) {
			abort()
		}
		finish(true)
		return qerr
	}
	for r, c := range calls {
		if err := c.b.drv.StreamSynchronize(c.lease.Stream); err != nil {
			e := driverError(op, "StreamSynchronize", err)
			e.Detail = fmt.Sprintf("rank %d: %s", r, e.Detail)
			abort()
			finish(true)
			return e
		}
		c.b.tel.syncPoints.Add(1)
	}
	finish(false)
	return nil
}
