package sim

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// collArgs is one rank's part of a collective call as its caller gave
// it: sendN and recvN are the element counts of its send and recv ranges.
type collArgs struct {
	o            Op
	send, recv   uint64
	sendN, recvN uint64 // sendN is the call's element count
	dt           driver.DataType
	red          driver.ReduceOp
	root         int
}

// queue validates rank c's part of a collective and queues it on s. On a
// capturing stream the part is recorded instead: each launch of the graph
// queues a part of its own, as a new call that meets the other ranks' next
// calls (relaunch).
func (c *comm) queue(o Op, send, recv, sendN, recvN uint64, dt driver.DataType, red driver.ReduceOp, root int, s driver.Stream) error {
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	a := &collArgs{o: o, send: send, recv: recv, sendN: sendN, recvN: recvN, dt: dt, red: red, root: root}
	if err := c.checkCall(a); err != nil {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if err := c.checkMemory(a); err != nil {
		return err
	}
	if st.capture != nil {
		d.enqueue(st, &op{kind: o, relaunch: func(st *stream) { c.relaunch(a, st) }})
		return nil
	}
	return c.add(a, st)
}

// checkCall refuses a call on a destroyed or aborted communicator, bad
// arguments, and a grouped clique's call outside GroupStart/GroupEnd. The
// Machine lock is held.
func (c *comm) checkCall(a *collArgs) error {
	cl, o := c.cl, a.o
	switch {
	case c.destroyed:
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "communicator rank %d was destroyed", c.rank)
	case cl.aborted:
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "a rank of the communicator aborted it")
	case !a.dt.Valid():
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "data type %d", int(a.dt))
	case !a.red.Valid():
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "reduction %d", int(a.red))
	case a.root < 0 || a.root >= len(cl.ranks):
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "root %d of %d ranks", a.root, len(cl.ranks))
	case cl.grouped && len(cl.ranks) > 1 && c.dev.machine.group == 0:
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_STATE,
			"rank %d of %d called outside GroupStart/GroupEnd; one goroutine driving several ranks would wait forever", c.rank, len(cl.ranks))
	}
	return nil
}

// checkMemory checks that the part's send (where the rank reads one) and
// recv ranges lie in live device memory. The Machine lock is held.
func (c *comm) checkMemory(a *collArgs) error {
	d, size := c.dev, uint64(a.dt.Size())
	if a.sendN > 0 && (a.o != OpBroadcast || c.rank == a.root) {
		if err := d.checkDevice(a.o, "send", a.send, a.sendN*size); err != nil {
			return err
		}
	}
	if a.recvN > 0 {
		if err := d.checkDevice(a.o, "recv", a.recv, a.recvN*size); err != nil {
			return err
		}
	}
	return nil
}

// add queues rank c's part of its next call on st, matched with the other
// ranks' parts of that call by sequence number. The Machine lock is held.
func (c *comm) add(a *collArgs, st *stream) error {
	d, cl, o := c.dev, c.cl, a.o
	seq := cl.next[c.rank]
	call := cl.calls[seq]
	if call == nil {
		call = &collCall{kind: o, count: a.sendN, dt: a.dt, red: a.red, root: a.root, parts: make([]*collPart, len(cl.ranks))}
	} else if call.kind != o || call.count != a.sendN || call.dt != a.dt || call.red != a.red || call.root != a.root {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE,
			"rank %d's call %d (%s of %d %s) does not match the other ranks' (%s of %d %s); on a GPU the ranks would hang or corrupt data",
			c.rank, seq, o, a.sendN, a.dt, call.kind, call.count, call.dt)
	}
	cl.calls[seq] = call
	cl.next[c.rank]++
	part := &collPart{dev: d, st: st, send: a.send, recv: a.recv}
	part.op = &op{kind: o, cost: peerCost(a.recvN * uint64(a.dt.Size())), run: func(*Device) *Error { return cl.execute(d.machine, seq, call, c.rank) },
		ready: func() bool { return cl.ready(call) }}
	call.parts[c.rank] = part
	d.enqueue(st, part.op)
	d.machine.cond.Broadcast()
	return nil
}

// relaunch queues, on st, the part of a collective that a graph launch
// runs: a new call of rank c, checked again as a call queued now would be
// (the communicator may have been destroyed or aborted since the capture).
// A part that cannot be queued fails when the stream executes it. The
// Machine lock is held.
func (c *comm) relaunch(a *collArgs, st *stream) {
	err := c.checkCall(a)
	if err == nil {
		err = c.checkMemory(a)
	}
	if err == nil {
		err = c.add(a, st)
	}
	if err != nil {
		e, ok := err.(*Error)
		if !ok {
			e = fail(a.o, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "%v", err)
		}
		c.dev.enqueue(st, &op{kind: a.o, run: func(*Device) *Error { return e }})
	}
}

// ready reports whether a part of call can execute without waiting: the
// call is done or abandoned, or every rank has queued its part and the
// work queued before each part can execute without waiting. Parts of a
// grouped clique never wait (a missing part fails instead). A call met
// again while its own readiness is being worked out (a cycle of waits,
// which would deadlock on a GPU) is not ready.
func (cl *clique) ready(call *collCall) bool {
	if call.done || cl.aborted || cl.grouped {
		return true
	}
	if call.visiting {
		return false
	}
	call.visiting = true
	defer func() { call.visiting = false }()
	for _, p := range call.parts {
		if p == nil || !p.st.readyBefore(p.op) {
			return false
		}
	}
	return true
}

// execute runs collective call seq when one of its parts executes: it first
// runs every other rank's stream up to its part, then computes the result
// for all ranks at once; the parts that execute later find it done.
//
// Ranks joined from several goroutines (JoinCommunicator) wait, with the
// Machine's lock released, for the ranks that have not queued their part
// yet, as a GPU would; ranks driven by one goroutine (NewCommunicators)
// fail instead, since nobody else could queue the missing part. After an
// abort, the parts of ranks that aborted execute as no-ops and the others
// fail with CUDA_ERROR_ILLEGAL_STATE.
func (cl *clique) execute(m *Machine, seq uint64, call *collCall, rank int) *Error {
	for r := 0; r < len(call.parts) && !call.done && !cl.aborted; r++ {
		for call.parts[r] == nil && !cl.aborted {
			if cl.grouped {
				return fail(call.kind, cudaapi.CUDA_ERROR_ILLEGAL_STATE,
					"rank %d's part of collective call %d executed before rank %d queued its part; on a GPU it would wait forever", rank, seq, r)
			}
			// A query reaches here only through another stream's earlier
			// work; this wait is a synchronization's, not the query's.
			polling := m.polling
			m.polling = false
			m.cond.Wait()
			m.polling = polling
		}
	}
	if call.done {
		return nil
	}
	if cl.aborted {
		if cl.ranks[rank].destroyed {
			return nil // this rank aborted too: its part is abandoned
		}
		return fail(call.kind, cudaapi.CUDA_ERROR_ILLEGAL_STATE,
			"another rank aborted the communicator before collective call %d completed", seq)
	}
	for r, p := range call.parts {
		if r != rank && !p.op.done {
			if err := p.dev.runBefore(p.st, p.op); err != nil {
				return err
			}
		}
	}
	call.done = true
	delete(cl.calls, seq)
	return call.compute()
}

// runBefore executes st's queued work up to, not including, o. When o has
// left the queue already (its stream is executing it, or waits inside it),
// everything before it has run.
func (d *Device) runBefore(st *stream, o *op) *Error {
	queued := false
	for _, q := range st.queue {
		queued = queued || q == o
	}
	if !queued {
		return nil
	}
	if st.running {
		return fail(OpStreamWaitEvent, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "cyclic stream dependency")
	}
	st.running = true
	defer func() { st.running = false }()
	for len(st.queue) > 0 && st.queue[0] != o {
		next := st.queue[0]
		st.queue[0] = nil
		st.queue = st.queue[1:]
		st.dev.queued--
		st.dev.execute(next)
	}
	return nil
}

// compute reads every rank's send range and writes every rank's recv range.
func (call *collCall) compute() *Error {
	size := uint64(call.dt.Size())
	n := len(call.parts)
	read := func(r int, ptr, count uint64) ([]byte, *Error) {
		return call.parts[r].dev.execDevice(call.kind, "send", ptr, count*size)
	}
	write := func(r int, count uint64) ([]byte, *Error) {
		return call.parts[r].dev.execDevice(call.kind, "recv", call.parts[r].recv, count*size)
	}
	var sends [][]byte
	if call.kind != OpBroadcast {
		for r, p := range call.parts {
			b, err := read(r, p.send, call.count)
			if err != nil {
				return err
			}
			sends = append(sends, append([]byte(nil), b...)) // recv may alias send
		}
	}
	switch call.kind {
	case OpAllReduce, OpReduceScatter:
		sum := reduceBytes(call.dt, call.red, sends)
		blk := uint64(len(sum)) / uint64(n)
		for r := range call.parts {
			if call.kind == OpAllReduce {
				out, err := write(r, call.count)
				if err != nil {
					return err
				}
				copy(out, sum)
				continue
			}
			out, err := write(r, call.count/uint64(n))
			if err != nil {
				return err
			}
			copy(out, sum[uint64(r)*blk:])
		}
	case OpBroadcast:
		src, err := read(call.root, call.parts[call.root].send, call.count)
		if err != nil {
			return err
		}
		src = append([]byte(nil), src...)
		for r := range call.parts {
			out, err := write(r, call.count)
			if err != nil {
				return err
			}
			copy(out, src)
		}
	case OpAllGather:
		for r := range call.parts {
			out, err := write(r, call.count*uint64(n))
			if err != nil {
				return err
			}
			for k, s := range sends {
				copy(out[k*len(s):], s)
			}
		}
	}
	return nil
}
