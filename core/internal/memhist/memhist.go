// Package memhist records a bounded history of device memory events (a
// block handed out, given back, cached blocks released by a retry or a
// trim, an allocation refused) with the stack of the goroutine that caused
// each, and the set of blocks live now with where each was allocated.
//
// It knows nothing of drivers, Backends or what a block is for: the device
// pool reports events with addresses and sizes and core turns a Snapshot
// into its public form. A Recorder costs nothing until it exists: the pool
// holds a pointer to one and checks it for nil.
package memhist

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// Kind is what happened.
type Kind uint8

// The kinds of event.
const (
	Alloc Kind = iota + 1 // a block was handed out
	Free                  // a block was given back
	Retry                 // an allocation released cached blocks to try again
	Trim                  // cached blocks were released on request
	OOM                   // an allocation was refused for lack of room
)

var kindNames = [...]string{Alloc: "alloc", Free: "free", Retry: "retry", Trim: "trim", OOM: "oom"}

// String returns the kind's lower-case name ("alloc", "free", ...).
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one recorded event.
type Event struct {
	Kind Kind
	Time time.Time
	Op   string // the operation that caused it, as the pool was told
	Addr uint64 // the block's address (Alloc, Free); 0 otherwise
	// Requested is the bytes asked for (Alloc, Free, OOM, Retry); Size the
	// bytes the block reserves (Alloc, Free, OOM), or the cached bytes
	// released (Retry, Trim).
	Requested, Size uint64
	// Allocated is the requested bytes of the live blocks the Recorder
	// knows after the event; Reserved what the reserved callback reported
	// then.
	Allocated, Reserved uint64
	Stack               []uintptr // program counters, innermost first
}

// Block is one live block.
type Block struct {
	Addr, Requested, Size uint64
	Op                    string
	Time                  time.Time // when it was handed out; zero for a seeded block
	Stack                 []uintptr // nil for a seeded block
}

// Snapshot is a Recorder's state at one moment.
type Snapshot struct {
	Max       int
	Events    []Event // oldest first
	Dropped   uint64  // events that fell out of the ring
	Live      []Block // oldest first; seeded blocks first of all
	Allocated uint64  // the requested bytes of Live
}

// maxDepth is the most program counters kept per event.
const maxDepth = 16

// maxStacks bounds the table of distinct stacks; it starts over when full
// (events keep the stacks they hold).
const maxStacks = 4096

// Recorder keeps the last Max events and the live blocks. It is safe for
// concurrent use.
type Recorder struct {
	reserved func() uint64

	mu        sync.Mutex
	max       int
	ring      []Event // chronological until full, then next is the oldest
	next      int
	dropped   uint64
	live      map[uint64]Block
	allocated uint64
	stacks    map[[maxDepth]uintptr][]uintptr
}

// New returns a Recorder that keeps the last n events (at least 1);
// reserved, which may be nil, reports the reserved bytes each event
// records.
func New(n int, reserved func() uint64) *Recorder {
	return &Recorder{max: max(n, 1), reserved: reserved, live: map[uint64]Block{},
		stacks: map[[maxDepth]uintptr][]uintptr{}}
}

// Resize keeps the last n events (at least 1) from now on, dropping the
// oldest ones beyond it.
func (r *Recorder) Resize(n int) {
	n = max(n, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.eventsLocked()
	if len(ev) > n {
		r.dropped += uint64(len(ev) - n)
		ev = ev[len(ev)-n:]
	}
	r.ring, r.next, r.max = ev, 0, n
}

// Seed enters a block that was live before recording began, unless one at
// addr is known already. It records no event.
func (r *Recorder) Seed(addr, requested, size uint64, op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[addr]; !ok {
		r.live[addr] = Block{Addr: addr, Requested: requested, Size: size, Op: op}
		r.allocated += requested
	}
}

// Alloc records a block handed out to op's caller.
func (r *Recorder) Alloc(op string, addr, requested, size uint64) {
	r.record(Event{Kind: Alloc, Op: op, Addr: addr, Requested: requested, Size: size})
}

// Free records a block given back.
func (r *Recorder) Free(op string, addr, requested, size uint64) {
	r.record(Event{Kind: Free, Op: op, Addr: addr, Requested: requested, Size: size})
}

// Released records cached bytes given back by a Retry or a Trim; requested
// is the allocation that retried (0 for a trim).
func (r *Recorder) Released(kind Kind, op string, requested, released uint64) {
	r.record(Event{Kind: kind, Op: op, Requested: requested, Size: released})
}

// OOM records an allocation refused for lack of room.
func (r *Recorder) OOM(op string, requested, size uint64) {
	r.record(Event{Kind: OOM, Op: op, Requested: requested, Size: size})
}

// record stamps ev with the time, the caller's stack and the byte counts,
// applies it to the live set and puts it in the ring.
func (r *Recorder) record(ev Event) {
	var pcs [maxDepth]uintptr
	// Skip runtime.Callers, record and the exported method.
	runtime.Callers(3, pcs[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	ev.Time = time.Now() // under the lock, so the ring is in time order
	ev.Stack = r.internLocked(&pcs)
	switch ev.Kind {
	case Alloc:
		if old, ok := r.live[ev.Addr]; ok { // a block we missed the free of
			r.allocated -= old.Requested
		}
		r.live[ev.Addr] = Block{Addr: ev.Addr, Requested: ev.Requested, Size: ev.Size, Op: ev.Op, Time: ev.Time, Stack: ev.Stack}
		r.allocated += ev.Requested
	case Free:
		if old, ok := r.live[ev.Addr]; ok {
			r.allocated -= old.Requested
			delete(r.live, ev.Addr)
		}
	}
	ev.Allocated = r.allocated
	if r.reserved != nil {
		ev.Reserved = r.reserved()
	}
	if len(r.ring) < r.max {
		r.ring = append(r.ring, ev)
		return
	}
	r.ring[r.next] = ev
	r.next = (r.next + 1) % r.max
	r.dropped++
}

// internLocked returns the stack in pcs as a slice shared by every event
// with the same stack.
func (r *Recorder) internLocked(pcs *[maxDepth]uintptr) []uintptr {
	if s, ok := r.stacks[*pcs]; ok {
		return s
	}
	if len(r.stacks) >= maxStacks {
		clear(r.stacks)
	}
	n := slices.Index(pcs[:], 0)
	if n < 0 {
		n = maxDepth
	}
	s := slices.Clone(pcs[:n])
	r.stacks[*pcs] = s
	return s
}

// eventsLocked returns the ring's events, oldest first, in a new slice.
func (r *Recorder) eventsLocked() []Event {
	out := make([]Event, 0, len(r.ring))
	out = append(out, r.ring[r.next:]...)
	return append(out, r.ring[:r.next]...)
}

// Snapshot returns the events and the live blocks now. The stacks are
// shared with the Recorder: read them only.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	s := Snapshot{Max: r.max, Events: r.eventsLocked(), Dropped: r.dropped, Allocated: r.allocated,
		Live: make([]Block, 0, len(r.live))}
	for _, b := range r.live {
		s.Live = append(s.Live, b)
	}
	r.mu.Unlock()
	slices.SortFunc(s.Live, func(a, b Block) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmpU64(a.Addr, b.Addr)
	})
	return s
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
