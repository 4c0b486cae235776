package core

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// CollectiveKind is which collective a CollectiveStep runs.
type CollectiveKind int

// The collectives a CollectiveStep runs; each is what the Comm method of
// the same name does.
const (
	CollAllReduce     CollectiveKind = iota // every rank's Send reduced with Op into every rank's Recv
	CollBroadcast                           // the Root's Send copied into every rank's Recv
	CollAllGather                           // every rank's Send, in rank order, into every rank's Recv
	CollReduceScatter                       // block r of the reduction of every rank's Send into rank r's Recv
)

// String returns the collective's name, e.g. "AllReduce".
func (k CollectiveKind) String() string { return collective.Kind(k).String() }

// CollectiveStep is this rank's part of a collective over Comm, run as a
// step of a Batch (Step.Collective): Recv (and Send, where the rank reads
// one) are resident buffers of the batch's Backend, whole, with the
// lengths the Comm method of the same kind takes. Send may be Recv (in
// place); a broadcast reads Send on its Root only (the other ranks may
// leave it zero). Op is the reduction of CollAllReduce and
// CollReduceScatter, Root the root rank of CollBroadcast.
type CollectiveStep struct {
	Comm       *Comm
	Kind       CollectiveKind
	Send, Recv Buffer
	Type       DataType
	Op         ReduceOp
	Root       int
}

// args returns the collective.Args of cs (its Comm must be set).
func (cs *CollectiveStep) args() collective.Args {
	return collective.Args{Kind: collective.Kind(cs.Kind), DT: cs.Type, Red: cs.Op, Root: cs.Root, Ranks: cs.Comm.size}
}

// collPlan is one validated collective step: the step's buffers are its
// Recv, then its Send when the rank reads one.
type collPlan struct {
	comm  *Comm
	args  collective.Args
	count uint64 // elements per rank block
	send  bool   // the rank reads Send
}

// checkCollStep validates step i's form: a collective step names no
// program, buffers or arguments, and a Comm of b (nil b: any Backend), and
// a known kind.
func checkCollStep(op string, b *Backend, i int, s *Step) error {
	cs := s.Collective
	switch {
	case s.Program != nil || len(s.Bufs) > 0 || len(s.Config.Args) > 0 || len(s.Config.Scalars) > 0:
		return newError(op, KindInvalidArgument, fmt.Sprintf("step %d: has both a Collective and a kernel's Program, Bufs or arguments", i),
			"make each step either a kernel (Program, Bufs, Config) or a collective (Collective), never both")
	case cs.Comm == nil:
		return newError(op, KindInvalidArgument, fmt.Sprintf("step %d: the collective's Comm is nil", i),
			"join a Comm with Backend.JoinComm, or take one from Group.Comm")
	case b != nil && cs.Comm.b != b:
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("step %d: the Comm (rank %d of %d) is bound to another Backend", i, cs.Comm.rank, cs.Comm.size),
			"run each rank's collective steps on the Backend its Comm was joined on")
	case cs.Kind < CollAllReduce || cs.Kind > CollReduceScatter:
		return newError(op, KindInvalidArgument, fmt.Sprintf("step %d: collective kind %d", i, int(cs.Kind)),
			"pass one of the core.Coll* kinds")
	}
	return nil
}

// collShape validates collective step i and returns its plan and its
// buffers (Recv, then Send when the rank reads one): the rank's own shape
// as the Comm method checks it (collective.Args.Shape).
func collShape(op string, i int, s *Step) (*collPlan, []Buffer, error) {
	if err := checkCollStep(op, nil, i, s); err != nil {
		return nil, nil, err
	}
	cs := s.Collective
	cp := &collPlan{comm: cs.Comm, args: cs.args()}
	cp.send = cp.args.NeedsSend(cs.Comm.rank)
	sendLen := 0
	if cp.send {
		sendLen = cs.Send.Len
	}
	n, err := cp.args.Shape(op, cs.Comm.rank, sendLen, cs.Recv.Len)
	if err != nil {
		return nil, nil, stepError(i, err)
	}
	cp.count = n
	bufs := []Buffer{cs.Recv}
	if cp.send {
		bufs = append(bufs, cs.Send)
	}
	return cp, bufs, nil
}

// stepError prefixes an *Error's detail with "step i: ".
func stepError(i int, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.Detail = fmt.Sprintf("step %d: %s", i, e.Detail)
	return &c
}

// queue queues step i, collective cp of pl, on s, under its Comm's state
// lock.
func (cp *collPlan) queue(op string, pl *batchPlan, i int, s Stream) *Error {
	start := pl.lay.stepStarts[i]
	recv := pl.ents[start].ptr
	send := recv
	if cp.send {
		send = pl.ents[start+1].ptr
	}
	err := queueComm{cp.comm}.with(func(c Communicator) error { return cp.args.Queue(c, send, recv, cp.count, s) })
	if err == nil {
		return nil
	}
	if errors.Is(err, errCommAborted) {
		e := abortedComm(op)
		e.Detail = fmt.Sprintf("step %d: %s", i, e.Detail)
		return e
	}
	e := driverError(op, cp.args.Kind.String(), err)
	e.Detail = fmt.Sprintf("step %d (%s, rank %d of %d): %s", i, cp.args.Kind, cp.comm.rank, cp.comm.size, e.Detail)
	return e
}

// batchComms is what a batch's collective steps need beyond the plan: the
// distinct Comms they use, locked (Comm.mu) in address order from before
// the batch is checked until its steps are queued, so no other call on a
// Comm comes between this rank's exchange of call descriptions and its
// queueing; and the context of the exchanges. A nil *batchComms (a batch
// without collective steps) does nothing.
type batchComms struct {
	ctx    context.Context
	comms  []*Comm
	steps  []Step // the batch's steps
	locked bool
}

// lockComms checks the form of every collective step of steps, locks
// their Comms and refuses a closed or aborted one (ErrClosed). It returns
// nil when no step is a collective. On failure nothing is locked.
func lockComms(ctx context.Context, op string, b *Backend, steps []Step) (*batchComms, error) {
	if b == nil {
		return nil, nil // the caller's enter refuses a nil Backend
	}
	var comms []*Comm
	for i := range steps {
		s := &steps[i]
		if s.Collective == nil {
			continue
		}
		if err := checkCollStep(op, b, i, s); err != nil {
			return nil, err
		}
		comms = append(comms, s.Collective.Comm)
	}
	if comms == nil {
		return nil, nil
	}
	sort.Slice(comms, func(i, j int) bool { return uintptr(unsafe.Pointer(comms[i])) < uintptr(unsafe.Pointer(comms[j])) })
	uniq := comms[:1]
	for _, c := range comms[1:] {
		if c != uniq[len(uniq)-1] {
			uniq = append(uniq, c)
		}
	}
	bc := &batchComms{ctx: ctx, comms: uniq, steps: steps, locked: true}
	for _, c := range uniq {
		c.mu.Lock()
	}
	for _, c := range uniq {
		if err := c.usable(op); err != nil {
			bc.unlock()
			return nil, err
		}
	}
	return bc, nil
}

// unlock unlocks the Comms, once.
func (bc *batchComms) unlock() {
	if bc == nil || !bc.locked {
		return
	}
	bc.locked = false
	for i := len(bc.comms) - 1; i >= 0; i-- {
		bc.comms[i].mu.Unlock()
	}
}

// list returns the Comms (nil for nil bc).
func (bc *batchComms) list() []*Comm {
	if bc == nil {
		return nil
	}
	return bc.comms
}

// abortComms aborts every Comm of comms (see Comm.abort).
func abortComms(comms []*Comm) {
	for _, c := range comms {
		c.abort()
	}
}

// refuse tells the other ranks that this rank refused its batch (local,
// a failure before anything was queued): through the first collective
// step whose Comm checks calls (WithCollectiveChecks), the exchange that
// the other ranks' batches make first. Every rank stops at the first
// exchange that fails, so one exchange is all the others wait for.
func (bc *batchComms) refuse(op string, local error) {
	if bc == nil {
		return
	}
	for i := range bc.steps {
		cs := bc.steps[i].Collective
		if cs == nil || cs.Comm.chk == nil {
			continue
		}
		a := cs.args()
		_ = cs.Comm.agree(bc.ctx, op, &a, 0, local) // local is the error to report
		return
	}
}

// agree compares every collective step whose Comm checks calls with the
// other ranks' calls, in step order (see WithCollectiveChecks), stopping
// at the first that differs. The Backend is entered and the Comms locked.
func (bc *batchComms) agree(op string, pl *batchPlan) error {
	if bc == nil {
		return nil
	}
	for i := range pl.plans {
		cp := pl.plans[i].coll
		if cp == nil || cp.comm.chk == nil {
			continue
		}
		if err := cp.comm.agree(bc.ctx, op, &cp.args, cp.count, nil); err != nil {
			return stepError(i, err)
		}
	}
	return nil
}

// useComms adds n (1 or -1) to the uses of every Comm of comms.
func useComms(comms []*Comm, n int) {
	for _, c := range comms {
		c.use(n)
	}
}

// collStep validates collective step i, whose buffers start at position n
// of the batch's buffers, into pl.
func (pl *batchPlan) collStep(op string, i, n int) error {
	cp, bufs, err := collShape(op, i, &pl.batch.Steps[i])
	if err != nil {
		return err
	}
	if pl.lay.coll == nil {
		pl.lay.coll = make([]bool, len(pl.batch.Steps))
	}
	pl.lay.coll[i] = true
	pl.plans[i].coll, pl.stepBufs[i], pl.lay.stepStarts[i] = cp, bufs, n
	pl.colls++
	return nil
}

// abortedUnder reports work on comms that finished with one of them
// aborted (nil when none was): another call's failure or done context
// aborted it, perhaps before this work's part ran, so its collective
// results are undefined.
func abortedUnder(op string, comms []*Comm) *Error {
	for _, c := range comms {
		if c.aborted() {
			return newError(op, KindClosed,
				fmt.Sprintf("the communicator (rank %d of %d) was aborted, after a failure or a done context elsewhere, before the work was seen to finish; the results of its collectives are undefined", c.rank, c.size),
				"join a new communicator on every rank (Group.Comm joins a new one) and run the work again")
		}
	}
	return nil
}
