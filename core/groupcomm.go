package core

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// commSet is the communicator Group.Comm hands out: one Comm per Backend
// of the group, rank i on Backend i, joined together.
type commSet struct {
	comms []*Comm
}

// abortOthers aborts every rank of s but from (see Comm.abort).
func (s *commSet) abortOthers(from *Comm) {
	for _, c := range s.comms {
		if c != from {
			c.abortOwn()
		}
	}
}

// gone reports whether a rank of s was aborted or closed: the set is of no
// more use, since no collective can pair all of its ranks.
func (s *commSet) gone() bool {
	for _, c := range s.comms {
		c.state.Lock()
		gone := c.closed || c.c == nil
		c.state.Unlock()
		if gone {
			return true
		}
	}
	return false
}

// close closes every rank of s that is still open, or none: while a rank
// is used by an open Graph or uncollected work it refuses with that rank's
// ErrInFlight and closes nothing. The ranks' calls are waited for (their
// mu is taken, in address order, as a batch takes its Comms').
func (s *commSet) close(op string) error {
	order := append([]*Comm(nil), s.comms...)
	sort.Slice(order, func(i, j int) bool { return uintptr(unsafe.Pointer(order[i])) < uintptr(unsafe.Pointer(order[j])) })
	for _, c := range order {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	for _, c := range s.comms {
		c.state.Lock()
		uses := c.uses
		c.state.Unlock()
		if uses > 0 {
			return c.closeLocked(op) // refuses, naming the uses
		}
	}
	var first error
	for _, c := range s.comms {
		if err := c.closeLocked(op); err != nil && !errors.Is(err, ErrClosed) && first == nil {
			first = err
		}
	}
	return first
}

// Comm returns the Comm of Backend i (rank i) of a communicator over every
// device of the group, for collectives as steps of a Batch
// (Step.Collective) or graphs, run from one goroutine per device: each
// Backend's batch is queued by its own goroutine, which NCCL requires when
// a process drives several devices without grouping their calls. The
// first call joins the communicator (every Backend joins at once, through
// NewCommID and JoinComm; WithCollectiveChecks applies), and later calls
// return its ranks; when any of its ranks was aborted (after a failure, or
// a context done) or closed, the next call closes the others and joins a
// new one, whose ranks every goroutine must then fetch again. Group.Close
// closes it.
//
// This communicator is not the one the Group's own collectives
// (AllReduce, ...) use; do not run both at once on a group's devices, since
// two communicators whose calls interleave in different orders on
// different devices can wait for each other forever.
//
// An index outside 0 to Len()-1 is ErrInvalidArgument; a closed Group is
// ErrClosed. A join that fails on a Backend fails the call, with every
// rank that joined closed.
func (g *Group) Comm(i int) (*Comm, error) {
	const op = "Group.Comm"
	if g == nil {
		return nil, newError(op, KindInvalidArgument, "the Group is nil", "open one with OpenDevices or OpenGroup")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, newError(op, KindClosed, "the Group is closed", "open a new Group")
	}
	if i < 0 || i >= len(g.bs) {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("index %d of a group of %d Backends", i, len(g.bs)),
			"pass an index from 0 to Len()-1")
	}
	if g.set != nil && g.set.gone() {
		if err := g.set.close(op); err != nil {
			return nil, err
		}
		g.set = nil
	}
	if g.set == nil {
		set, err := g.joinSet(op)
		if err != nil {
			return nil, err
		}
		g.set = set
	}
	return g.set.comms[i], nil
}

// joinSet joins every Backend of g as its rank of a new communicator, one
// goroutine each. A failed join stops the others' (their context is
// cancelled) and closes the ranks that joined. g.mu is held.
func (g *Group) joinSet(op string) (*commSet, error) {
	b0 := g.bs[0]
	if err := b0.enter(op); err != nil {
		return nil, err
	}
	cd, err := collective.Of(op, b0.drv, noCollectivesFix)
	var id CommID
	if err == nil {
		if id, err = cd.NewCommID(); err != nil {
			err = collective.CommError(op, "NewCommID", err)
		}
	}
	b0.exit()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := len(g.bs)
	set := &commSet{comms: make([]*Comm, n)}
	var mu sync.Mutex // guards first
	var first error
	var wg sync.WaitGroup
	for i, b := range g.bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.joinComm(ctx, op, id, n, i)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel() // the others would wait for this rank forever
				}
				mu.Unlock()
				return
			}
			set.comms[i] = c
		}()
	}
	wg.Wait()
	if first != nil {
		for _, c := range set.comms {
			if c != nil {
				c.abortOwn()
				_ = c.Close() // an aborted rank only frees its checks' buffer
			}
		}
		return nil, first
	}
	for _, c := range set.comms {
		c.set = set
	}
	return set, nil
}

// closeSet closes Group.Comm's communicator, if any; g.mu is held. It
// keeps the set when a rank refuses (ErrInFlight), for the next try.
func (g *Group) closeSet(op string) error {
	if g.set == nil {
		return nil
	}
	if err := g.set.close(op); err != nil {
		return err
	}
	g.set = nil
	return nil
}
