// Package streams owns the launch resources of one device: a Pool of
// non-blocking streams, completion events and timing events that calls
// lease and return, and the Pool's quarantine of leases whose stream could
// not be synchronized after a failed call, held together with what that
// call's queued work may still use (quarantine.go).
//
// It works on driver handles (driver.Stream, driver.Event) and on Items its
// caller describes: a kind and a size for reports, and a callback that
// releases the item once its stream has synchronized. It knows nothing of
// resident buffers, staging or a Backend, and must not import core:
// package core decides what a failed call holds and how each thing goes
// back.
package streams

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// DefaultMaxIdle is how many idle resources of each kind a Pool keeps by
// default; more than that are destroyed when returned.
const DefaultMaxIdle = 32

// KindCounts counts one kind of launch resource: how many sit idle in the
// pool, and how many the pool has created and destroyed over its life.
// Created - Destroyed - Idle is the number leased out (or lost to a failed
// destroy, which is logged).
type KindCounts struct {
	Idle      int
	Created   uint64
	Destroyed uint64
}

// Counts reports a Pool per kind: non-blocking streams, completion events
// (timing disabled) and timing events, plus the number of leases out.
type Counts struct {
	Streams          KindCounts
	CompletionEvents KindCounts
	TimingEvents     KindCounts
	Leases           int
	// Quarantined counts the leases, among Leases, that the quarantine
	// holds because a failed call could not synchronize their stream:
	// their work may still use what the call held, which is held with them
	// until a retried synchronization succeeds.
	Quarantined int
	// Unfenced counts the leases given back with their work still queued
	// (ReturnUnfenced), not among Leases: their streams and events are
	// neither idle nor leased until a later Lease or Settle recycles them.
	Unfenced int
}

// Lease is the set of resources one launch or transfer batch uses: a
// non-blocking stream, a completion event and, when timing was asked for, a
// pair of timing events (zero otherwise). It goes back to its Pool with
// Pool.Return (or SyncOrQuarantine) exactly once; further returns do
// nothing.
type Lease struct {
	Stream     driver.Stream
	Done       driver.Event
	Start, End driver.Event

	pool     *Pool
	returned bool // guarded by pool.mu
}

// Pool recycles streams and events across launches. Streams are created
// non-blocking (Driver.StreamCreate never returns the legacy null stream),
// and every handle the driver returns is checked non-null before the pool
// keeps it. Idle resources are bounded per kind; resources returned after a
// driver error are destroyed instead of reused. A Pool is safe for
// concurrent use.
type Pool struct {
	drv     driver.Driver
	log     *slog.Logger
	maxIdle int

	mu     sync.Mutex // guards the fields up to quar; taken inside quar.mu, never around it
	idle   [numKinds][]uintptr
	stats  [numKinds]kindStats
	leases int // leases out, including ones being acquired and quarantined ones
	closed bool
	// unfenced are leases given back with their work queued (unfenced.go).
	unfenced []*Lease

	quar quarantine // quarantine.go
}

// kind indexes the per-kind tables of a Pool.
type kind int

const (
	kindStream kind = iota
	kindDoneEvent
	kindTimingEvent
	numKinds
)

var kindNames = [numKinds]string{"stream", "completion event", "timing event"}

type kindStats struct{ created, destroyed uint64 }

// NewPool returns an empty Pool over drv that keeps up to maxIdle idle
// resources of each kind (at least 1; DefaultMaxIdle is the usual bound).
// A nil log discards destroy-failure reports.
func NewPool(drv driver.Driver, log *slog.Logger, maxIdle int) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool{drv: drv, log: log, maxIdle: max(maxIdle, 1)}
}

// Lease retries the quarantine, then hands out a stream and a completion
// event, plus a start and an end timing event when timing is set. It is all
// or nothing: when any acquisition fails, everything acquired so far goes
// back to the pool and the lease count is unchanged. A closed pool refuses
// with ErrClosed. Errors carry op.
func (p *Pool) Lease(op string, timing bool) (*Lease, error) {
	p.RetryQuarantine()
	return p.acquire(op, true, timing)
}

// LeaseTimingPair hands out only a start and an end timing event, for
// timing work queued on a stream the caller already owns. It is all or
// nothing like Lease, and goes back with Return.
func (p *Pool) LeaseTimingPair(op string) (*Lease, error) {
	return p.acquire(op, false, true)
}

func (p *Pool) acquire(op string, stream, timing bool) (*Lease, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errs.New(op, errs.KindClosed, "launch-resource pool is closed",
			"open a new Backend; a closed one launches nothing")
	}
	// Counting the lease before acquiring keeps Close from destroying the
	// pool underneath an acquisition in progress.
	p.leases++
	p.mu.Unlock()

	l := &Lease{pool: p}
	var err error
	took := false
	if stream {
		if took = p.takeUnfenced(l); !took {
			if l.Stream, err = p.acquireStream(op); err == nil {
				l.Done, err = p.acquireEvent(op, kindDoneEvent)
			}
		}
		if err == nil {
			err = p.order(op, l)
		}
	}
	if err == nil && timing {
		if l.Start, err = p.acquireEvent(op, kindTimingEvent); err == nil {
			l.End, err = p.acquireEvent(op, kindTimingEvent)
		}
	}
	if err != nil {
		// What was acquired is healthy: only the next acquisition failed.
		// A stream taken from the unfenced leases may still have work.
		if took {
			_ = p.ReturnUnfenced(op, l)
		} else {
			p.Return(l, true)
		}
		return nil, err
	}
	return l, nil
}

// acquireStream pops an idle stream or creates a non-blocking one.
func (p *Pool) acquireStream(op string) (driver.Stream, error) {
	if h, ok := p.popIdle(kindStream); ok {
		return driver.Stream(h), nil
	}
	s, err := p.drv.StreamCreate()
	if err != nil {
		return 0, errs.Driver(op, "StreamCreate", err)
	}
	if s == 0 {
		return 0, errs.NullSuccess(op, "StreamCreate")
	}
	p.countCreated(kindStream)
	return s, nil
}

// acquireEvent pops an idle event of kind k or creates one.
func (p *Pool) acquireEvent(op string, k kind) (driver.Event, error) {
	if h, ok := p.popIdle(k); ok {
		return driver.Event(h), nil
	}
	e, err := p.drv.EventCreate(k == kindTimingEvent)
	if err != nil {
		return 0, errs.Driver(op, "EventCreate", err)
	}
	if e == 0 {
		return 0, errs.NullSuccess(op, "EventCreate")
	}
	p.countCreated(k)
	return e, nil
}

func (p *Pool) popIdle(k kind) (uintptr, bool) {
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

func (p *Pool) countCreated(k kind) {
	p.mu.Lock()
	p.stats[k].created++
	p.mu.Unlock()
}

// Return gives l's resources back to the pool. healthy=false (the work on
// them hit a driver error) destroys them instead of keeping them for reuse,
// as does a full idle list. Zero handles in l are skipped. It is idempotent
// per lease; a nil lease or one from another pool is ignored (the latter
// logged). Every stream returned must be idle.
func (p *Pool) Return(l *Lease, healthy bool) {
	if l == nil {
		return
	}
	if l.pool != p {
		p.log.Error("launch pool: return of a lease from another pool ignored")
		return
	}
	p.mu.Lock()
	if l.returned {
		p.mu.Unlock()
		return
	}
	l.returned = true
	p.leases--
	destroy := p.idleLocked(l, healthy)
	p.mu.Unlock()
	for _, it := range destroy {
		_ = p.destroy(it.k, it.h)
	}
}

// handle is one resource of a kind.
type handle struct {
	k kind
	h uintptr
}

// idleLocked puts l's resources on the idle lists (healthy, while they have
// room) and returns the ones to destroy; p.mu is held.
func (p *Pool) idleLocked(l *Lease, healthy bool) []handle {
	var destroy []handle
	for _, it := range [...]handle{
		{kindStream, uintptr(l.Stream)},
		{kindDoneEvent, uintptr(l.Done)},
		{kindTimingEvent, uintptr(l.Start)},
		{kindTimingEvent, uintptr(l.End)},
	} {
		if it.h == 0 {
			continue
		}
		if healthy && len(p.idle[it.k]) < p.maxIdle {
			p.idle[it.k] = append(p.idle[it.k], it.h)
		} else {
			destroy = append(destroy, it)
		}
	}
	return destroy
}

// destroy destroys one resource, counts it and logs a failure.
func (p *Pool) destroy(k kind, h uintptr) error {
	var err error
	if k == kindStream {
		err = p.drv.StreamDestroy(driver.Stream(h))
	} else {
		err = p.drv.EventDestroy(driver.Event(h))
	}
	if err != nil {
		p.log.Error("launch pool: destroy failed", "kind", kindNames[k], "handle", h, "err", err)
		return err
	}
	p.mu.Lock()
	p.stats[k].destroyed++
	p.mu.Unlock()
	return nil
}

// Counts reports idle, created and destroyed resources per kind, the
// leases out and, of those, the quarantined ones.
func (p *Pool) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	kc := func(k kind) KindCounts {
		return KindCounts{Idle: len(p.idle[k]), Created: p.stats[k].created, Destroyed: p.stats[k].destroyed}
	}
	return Counts{
		Streams:          kc(kindStream),
		CompletionEvents: kc(kindDoneEvent),
		TimingEvents:     kc(kindTimingEvent),
		Leases:           p.leases,
		Quarantined:      int(p.quar.leases.Load()),
		Unfenced:         len(p.unfenced),
	}
}

// Close waits for unfenced work (Settle), destroys every idle resource and
// refuses further leases. It refuses with ErrInFlight, changing nothing,
// while leases are out (quarantined ones included: SettleQuarantine
// first). Every resource is attempted; the
// first destroy failure is returned. A second Close returns nil.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.leases > 0 {
		n := p.leases
		p.mu.Unlock()
		return errs.New("close launch pool", errs.KindInFlight,
			fmt.Sprintf("%d launch-resource lease(s) still out", n),
			"await or close every pending dispatch before closing the Backend")
	}
	p.mu.Unlock()
	// Unfenced work ends before its stream is destroyed.
	first := p.Settle("close launch pool")
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = [numKinds][]uintptr{}
	p.mu.Unlock()

	for k := range idle {
		for _, h := range idle[k] {
			if err := p.destroy(kind(k), h); err != nil && first == nil {
				call := "EventDestroy"
				if kind(k) == kindStream {
					call = "StreamDestroy"
				}
				first = errs.Driver("close launch pool", call, err)
			}
		}
	}
	return first
}
