package core

import (
	"errors"
	"fmt"
	"sync"
)

// Group is several Backends, one per device, opened together and closed
// together, with the communicators their collectives use. Each Backend owns
// its device's context and its own resident buffers: a Buffer of one
// Backend is refused by the others (ErrUnknownHandle). A Group is safe for
// concurrent use.
type Group struct {
	bs []*Backend

	mu     sync.Mutex     // guards the fields below; held across collective calls
	comms  []Communicator // one per Backend, built by the first collective
	set    *commSet       // the communicator Group.Comm hands out, joined on first use
	closed bool
}

// OpenDevices opens a Backend on every visible CUDA device, ordinal i at
// index i, each retaining its device's primary context. When one fails to
// open, the ones already open are closed and the error is returned.
func OpenDevices(opts ...Option) (*Group, error) {
	const op = "OpenDevices"
	n, err := initDriver(op)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, newError(op, KindUnsupported, "no CUDA device is visible",
			"check nvidia-smi and CUDA_VISIBLE_DEVICES; use core/sim's NewMachine to run without a GPU")
	}
	g := &Group{}
	for i := 0; i < n; i++ {
		b, err := OpenCUDA(i, opts...)
		if err != nil {
			g.closeOpened()
			return nil, err
		}
		g.bs = append(g.bs, b)
	}
	return g, nil
}

// OpenGroup opens a Backend over each driver (as Open does, taking ownership
// of each), for instance over the devices of a sim.Machine. When one fails
// to open, the Backends already open are closed (closing their drivers),
// the rest of the drivers are left to the caller, and the error is returned.
func OpenGroup(drivers []Driver, opts ...Option) (*Group, error) {
	const op = "OpenGroup"
	if len(drivers) == 0 {
		return nil, newError(op, KindInvalidArgument, "no drivers", "pass one Driver per device")
	}
	g := &Group{}
	for i, d := range drivers {
		b, err := Open(d, opts...)
		if err != nil {
			g.closeOpened()
			var e *Error
			if errors.As(err, &e) {
				c := *e
				c.Op, c.Detail = op, fmt.Sprintf("driver %d: %s", i, e.Detail)
				return nil, &c
			}
			return nil, err
		}
		g.bs = append(g.bs, b)
	}
	return g, nil
}

func (g *Group) closeOpened() {
	for _, b := range g.bs {
		if err := b.Close(); err != nil {
			b.log.Error("closing a Backend after a failed group open failed", "err", err)
		}
	}
	g.bs = nil
}

// Len returns the number of Backends.
func (g *Group) Len() int {
	if g == nil {
		return 0
	}
	return len(g.bs)
}

// Backend returns the Backend at index i (device ordinal i for
// OpenDevices). An index outside 0 to Len()-1, or a nil Group, gives a nil
// Backend and ErrInvalidArgument naming i and the group's size.
func (g *Group) Backend(i int) (*Backend, error) {
	const op = "Group.Backend"
	if g == nil {
		return nil, newError(op, KindInvalidArgument, "the Group is nil", "open one with OpenDevices or OpenGroup")
	}
	if i < 0 || i >= len(g.bs) {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("index %d of a group of %d Backends", i, len(g.bs)),
			"pass an index from 0 to Len()-1")
	}
	return g.bs[i], nil
}

// Backends returns the Backends in order, in a new slice.
func (g *Group) Backends() []*Backend {
	if g == nil {
		return nil
	}
	return append([]*Backend(nil), g.bs...)
}

// Close destroys the group's communicators (Group.Comm's included: a rank
// still used by an open Graph or uncollected work refuses with
// ErrInFlight, as Comm.Close does, and stays open with its Backend) and
// closes every Backend (close the group rather than its Backends one by
// one: the communicators need their drivers to be destroyed). A
// Backend that refuses (ErrInFlight: work still in flight) stays open and
// its error is returned; the others are closed, and calling Close again
// closes what is left, and retries the frees a Backend's Close failed on
// (see Backend.Close). Close after everything is closed returns ErrClosed.
func (g *Group) Close() error {
	const op = "Group.Close"
	if g == nil {
		return newError(op, KindInvalidArgument, "the Group is nil", "call Close on a Group from OpenDevices or OpenGroup")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return newError(op, KindClosed, "the Group is closed", "open a new Group")
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(g.destroyComms(op))
	setErr := g.closeSet(op)
	keep(setErr)
	open := setErr != nil
	for _, b := range g.bs {
		err := b.Close()
		if errors.Is(err, ErrClosed) {
			continue
		}
		if errors.Is(err, ErrInFlight) || err != nil && b.closeRetryable() {
			open = true
		}
		keep(err)
	}
	g.closed = !open
	return first
}

// destroyComms destroys the communicators, if any; g.mu is held.
func (g *Group) destroyComms(op string) error {
	var first error
	for i, c := range g.comms {
		if err := c.Destroy(); err != nil && first == nil {
			first = driverError(op, fmt.Sprintf("communicator %d Destroy", i), err)
		}
	}
	g.comms = nil
	return first
}
