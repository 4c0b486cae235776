package core

import (
	"fmt"
	"log/slog"
	"sync"
)

// defaultLaunchIdle is how many idle resources of each kind a launch pool
// keeps by default; more than that are destroyed when given back.
const defaultLaunchIdle = 32

// LaunchKindCounts counts one kind of launch resource: how many sit idle in
// the pool, and how many the pool has created and destroyed over its life.
// Created - Destroyed - Idle is the number leased out (or lost to a failed
// destroy, which is logged).
type LaunchKindCounts struct {
	Idle      int
	Created   uint64
	Destroyed uint64
}

// LaunchResourceCounts reports a Backend's launch-resource pool per kind:
// non-blocking streams, completion events (timing disabled) and timing
// events, plus the number of leases currently out.
type LaunchResourceCounts struct {
	Streams          LaunchKindCounts
	CompletionEvents LaunchKindCounts
	TimingEvents     LaunchKindCounts
	Leases           int
	// Quarantined counts the leases, among Leases, that a Backend holds
	// because a failed call could not drain their stream: their work may
	// still use staging, which is held with them until a retried
	// synchronization succeeds (Backend.Close explains what happens then).
	Quarantined int
}

// launchLease is the set of resources one launch or transfer batch uses: a
// non-blocking stream, a completion event and, when timing was asked for, a
// pair of timing events (zero otherwise). It goes back to its pool with
// giveBack exactly once; further giveBacks do nothing.
type launchLease struct {
	Stream     Stream
	Done       Event
	Start, End Event

	pool     *launchPool
	returned bool // guarded by pool.mu
}

// launchPool recycles streams and events across launches. Streams are
// created non-blocking (Driver.StreamCreate never returns the legacy null
// stream), and every handle the driver returns is checked non-null before
// the pool keeps it. Idle resources are bounded per kind; resources given
// back after a driver error are destroyed instead of reused.
type launchPool struct {
	drv     Driver
	log     *slog.Logger
	maxIdle int

	mu     sync.Mutex // guards everything below
	idle   [numLaunchKinds][]uintptr
	stats  [numLaunchKinds]launchKindStats
	leases int // leases out, including ones being acquired
	closed bool
}

// launchKind indexes the per-kind tables of a launchPool.
type launchKind int

const (
	kindStream launchKind = iota
	kindDoneEvent
	kindTimingEvent
	numLaunchKinds
)

var launchKindNames = [numLaunchKinds]string{"stream", "completion event", "timing event"}

type launchKindStats struct{ created, destroyed uint64 }

// newLaunchPool returns an empty launch-resource pool over drv that keeps up
// to defaultLaunchIdle idle resources of each kind. A nil log discards
// destroy-failure reports.
func newLaunchPool(drv Driver, log *slog.Logger) *launchPool {
	return newLaunchPoolSize(drv, log, defaultLaunchIdle)
}

// newLaunchPoolSize is newLaunchPool with a chosen idle bound per kind
// (at least 1).
func newLaunchPoolSize(drv Driver, log *slog.Logger, maxIdle int) *launchPool {
	return &launchPool{drv: drv, log: orDiscard(log), maxIdle: max(maxIdle, 1)}
}

// lease hands out a stream and a completion event, plus a start and an end
// timing event when timing is set. It is all or nothing: when any
// acquisition fails, everything acquired so far goes back to the pool and
// the lease count is unchanged. A closed pool refuses with ErrClosed.
func (p *launchPool) lease(op string, timing bool) (*launchLease, error) {
	return p.acquire(op, true, timing)
}

// leaseTimingPair hands out only a start and an end timing event, for timing
// work queued on a stream the caller already owns. It is all or nothing like
// lease, and goes back with giveBack.
func (p *launchPool) leaseTimingPair(op string) (*launchLease, error) {
	return p.acquire(op, false, true)
}

func (p *launchPool) acquire(op string, stream, timing bool) (*launchLease, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, newError(op, KindClosed, "launch-resource pool is closed",
			"open a new Backend; a closed one launches nothing")
	}
	// Counting the lease before acquiring keeps close from destroying the
	// pool underneath an acquisition in progress.
	p.leases++
	p.mu.Unlock()

	l := &launchLease{pool: p}
	var err error
	if stream {
		if l.Stream, err = p.acquireStream(op); err == nil {
			l.Done, err = p.acquireEvent(op, kindDoneEvent)
		}
	}
	if err == nil && timing {
		if l.Start, err = p.acquireEvent(op, kindTimingEvent); err == nil {
			l.End, err = p.acquireEvent(op, kindTimingEvent)
		}
	}
	if err != nil {
		// What was acquired is healthy: only the next acquisition failed.
		p.giveBack(l, true)
		return nil, err
	}
	return l, nil
}

// acquireStream pops an idle stream or creates a non-blocking one.
func (p *launchPool) acquireStream(op string) (Stream, error) {
	if h, ok := p.popIdle(kindStream); ok {
		return Stream(h), nil
	}
	s, err := p.drv.StreamCreate()
	if err != nil {
		return 0, driverError(op, "StreamCreate", err)
	}
	if s == 0 {
		return 0, nullSuccess(op, "StreamCreate")
	}
	p.countCreated(kindStream)
	return s, nil
}

// acquireEvent pops an idle event of kind k or creates one.
func (p *launchPool) acquireEvent(op string, k launchKind) (Event, error) {
	if h, ok := p.popIdle(k); ok {
		return Event(h), nil
	}
	e, err := p.drv.EventCreate(k == kindTimingEvent)
	if err != nil {
		return 0, driverError(op, "EventCreate", err)
	}
	if e == 0 {
		return 0, nullSuccess(op, "EventCreate")
	}
	p.countCreated(k)
	return e, nil
}

func (p *launchPool) popIdle(k launchKind) (uintptr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.idle[k]
	if len(q) == 0 {
		return 0, false
	}
	h := q[len(q)-1]
	p.idle[k] = q[:len(q)-1]
	return h, true
}

func (p *launchPool) countCreated(k launchKind) {
	p.mu.Lock()
	p.stats[k].created++
	p.mu.Unlock()
}

// giveBack returns l's resources to the pool. healthy=false (the work on them
// hit a driver error) destroys them instead of keeping them for reuse, as
// does a full idle list. Zero handles in l are skipped. It is idempotent per
// lease; a nil lease or one from another pool is ignored (the latter logged).
func (p *launchPool) giveBack(l *launchLease, healthy bool) {
	if l == nil {
		return
	}
	if l.pool != p {
		p.log.Error("launch pool: giveBack of a lease from another pool ignored")
		return
	}
	items := [numLaunchKinds + 1]struct {
		k launchKind
		h uintptr
	}{
		{kindStream, uintptr(l.Stream)},
		{kindDoneEvent, uintptr(l.Done)},
		{kindTimingEvent, uintptr(l.Start)},
		{kindTimingEvent, uintptr(l.End)},
	}

	p.mu.Lock()
	if l.returned {
		p.mu.Unlock()
		return
	}
	l.returned = true
	p.leases--
	var destroy [len(items)]bool
	for i, it := range items {
		if it.h == 0 {
			continue
		}
		if healthy && len(p.idle[it.k]) < p.maxIdle {
			p.idle[it.k] = append(p.idle[it.k], it.h)
		} else {
			destroy[i] = true
		}
	}
	p.mu.Unlock()

	for i, it := range items {
		if destroy[i] {
			_ = p.destroy(it.k, it.h)
		}
	}
}

// destroy destroys one resource, counts it and logs a failure.
func (p *launchPool) destroy(k launchKind, h uintptr) error {
	var err error
	if k == kindStream {
		err = p.drv.StreamDestroy(Stream(h))
	} else {
		err = p.drv.EventDestroy(Event(h))
	}
	if err != nil {
		p.log.Error("launch pool: destroy failed", "kind", launchKindNames[k], "handle", h, "err", err)
		return err
	}
	p.mu.Lock()
	p.stats[k].destroyed++
	p.mu.Unlock()
	return nil
}

// counts reports idle, created and destroyed resources per kind and the
// leases out.
func (p *launchPool) counts() LaunchResourceCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	kc := func(k launchKind) LaunchKindCounts {
		return LaunchKindCounts{Idle: len(p.idle[k]), Created: p.stats[k].created, Destroyed: p.stats[k].destroyed}
	}
	return LaunchResourceCounts{
		Streams:          kc(kindStream),
		CompletionEvents: kc(kindDoneEvent),
		TimingEvents:     kc(kindTimingEvent),
		Leases:           p.leases,
	}
}

// close destroys every idle resource and refuses further leases. It refuses
// with ErrInFlight, changing nothing, while leases are out. Every resource is
// attempted; the first destroy failure is returned. A second close returns nil.
func (p *launchPool) close() error {
	p.mu.Lock()
	if p.leases > 0 {
		n := p.leases
		p.mu.Unlock()
		return newError("close launch pool", KindInFlight,
			fmt.Sprintf("%d launch-resource lease(s) still out", n),
			"await or close every pending dispatch before closing the Backend")
	}
	p.closed = true
	idle := p.idle
	p.idle = [numLaunchKinds][]uintptr{}
	p.mu.Unlock()

	var first error
	for k := range idle {
		for _, h := range idle[k] {
			if err := p.destroy(launchKind(k), h); err != nil && first == nil {
				call := "EventDestroy"
				if launchKind(k) == kindStream {
					call = "StreamDestroy"
				}
				first = driverError("close launch pool", call, err)
			}
		}
	}
	return first
}
