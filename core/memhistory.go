package core

import (
	"fmt"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/memhist"
)

// MemoryEventKind is what a MemoryEvent records.
type MemoryEventKind string

// The kinds of memory event.
const (
	MemoryAlloc MemoryEventKind = "alloc" // a device block was handed out
	MemoryFree  MemoryEventKind = "free"  // a device block was given back (to the cache or the driver)
	MemoryRetry MemoryEventKind = "retry" // an allocation released cached blocks to try again
	MemoryTrim  MemoryEventKind = "trim"  // Trim released cached blocks
	MemoryOOM   MemoryEventKind = "oom"   // an allocation was refused for lack of memory or budget
)

// MemoryFrame is one frame of the stack that caused a memory event.
type MemoryFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}

// MemoryEvent is one event of the memory history.
type MemoryEvent struct {
	Kind MemoryEventKind `json:"kind"`
	Time time.Time       `json:"time"`
	// Op is the Backend call that caused it ("Alloc", "Upload", "Run",
	// ...); empty for a retry.
	Op string `json:"op,omitempty"`
	// Addr is the block's device address (alloc and free).
	Addr uint64 `json:"addr,omitempty"`
	// Requested is the bytes asked for (alloc, free, retry, oom); Size the
	// bytes the block reserves, its size class (alloc, free, oom), or the
	// cached bytes released (retry, trim).
	Requested uint64 `json:"requested"`
	Size      uint64 `json:"size"`
	// Allocated is the requested bytes of the device blocks live after the
	// event (resident buffers and in-use transfer staging) that the
	// history knows of; Reserved is MemoryStats.Reserved after the event.
	Allocated uint64 `json:"allocated"`
	Reserved  uint64 `json:"reserved"`
	// Stack is the caller's stack, innermost first, starting at the first
	// frame outside vyrecuda's core: at most a few frames.
	Stack []MemoryFrame `json:"stack,omitempty"`
}

// MemoryBlock is one live device block.
type MemoryBlock struct {
	// Buffer is the ID of the resident Buffer the block holds; 0 for
	// transfer staging and dispatch scratch.
	Buffer    uint64 `json:"buffer,omitempty"`
	Addr      uint64 `json:"addr"`
	Requested uint64 `json:"requested"`
	Size      uint64 `json:"size"` // bytes reserved: the size class, or the exact size
	// Op, Time, Age and Stack say where and when the block was allocated;
	// they are empty for a block allocated while history was off.
	Op    string        `json:"op,omitempty"`
	Time  time.Time     `json:"time,omitzero"`
	Age   time.Duration `json:"age,omitempty"`
	Stack []MemoryFrame `json:"stack,omitempty"`
}

// MemorySnapshot is a Backend's device memory at one moment: the live
// blocks and the recorded history, with MemoryStats beside them. It is a
// plain value: encoding/json writes it as it is, and `vyrecuda memplot`
// draws the file.
type MemorySnapshot struct {
	Device  string    `json:"device"`
	Ordinal int       `json:"ordinal"`
	Time    time.Time `json:"time"`
	// Recording is true while RecordMemoryHistory is on; MaxEvents is its
	// bound and Dropped the events that fell out of it since it was set.
	Recording bool        `json:"recording"`
	MaxEvents int         `json:"max_events,omitempty"`
	Dropped   uint64      `json:"dropped,omitempty"`
	Stats     MemoryStats `json:"stats"`
	// Blocks are the live blocks, oldest first (those allocated before
	// recording began, first of all); Events the history, oldest first.
	Blocks []MemoryBlock `json:"blocks"`
	Events []MemoryEvent `json:"events"`
}

// historyFrames is the most stack frames kept per event or block.
const historyFrames = 4

// libraryFrames are the function-name prefixes of the frames a memory
// event's stack leaves out: the library's own, above the caller.
var libraryFrames = []string{
	"github.com/vyre-go/vyrecuda/core.",
	"github.com/vyre-go/vyrecuda/core/internal/",
	"github.com/vyre-go/vyrecuda/internal/",
}

// RecordMemoryHistory starts recording the Backend's device memory events
// (every block handed out or given back, cached memory released by a retry
// or by Trim, an allocation refused) with the caller's stack, keeping the
// last maxEvents of them; MemorySnapshot returns them. A call while
// recording changes the bound, keeping the newest events; maxEvents 0
// stops recording and discards the history. Live blocks are tracked
// whatever the bound. With history off (the default) an allocation pays one
// atomic load for it; with it on, a stack capture and a lock (docs/MEMORY.md
// gives the cost). A negative maxEvents is ErrInvalidArgument; a closed
// Backend is ErrClosed.
func (b *Backend) RecordMemoryHistory(maxEvents int) error {
	const op = "RecordMemoryHistory"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	if maxEvents < 0 {
		return newError(op, KindInvalidArgument, fmt.Sprintf("maxEvents is %d", maxEvents),
			"pass the number of events to keep, or 0 to stop recording")
	}
	if maxEvents == 0 {
		b.devPool.SetHistory(nil)
		return nil
	}
	if r := b.devPool.History(); r != nil {
		r.Resize(maxEvents)
		return nil
	}
	r := memhist.New(maxEvents, b.devPool.ReservedBytes)
	b.devPool.SetHistory(r)
	// Resident buffers allocated before now count as live; a free of one
	// removes it from the table before it reaches the pool, so holding the
	// table's lock here orders the two.
	b.store.mu.RLock()
	b.store.table.each(func(_ uint64, e *residentEntry) {
		r.Seed(e.ptr, uint64(e.n), e.alloc.Size(), "")
	})
	b.store.mu.RUnlock()
	return nil
}

// MemorySnapshot returns the live device blocks and, while
// RecordMemoryHistory is on, the recorded events. With history off the
// blocks are the resident buffers, without where they were allocated. It
// works on a closed Backend too; a nil Backend gives the zero snapshot.
func (b *Backend) MemorySnapshot() MemorySnapshot {
	if b == nil {
		return MemorySnapshot{}
	}
	s := MemorySnapshot{Device: b.info.Name, Ordinal: b.info.Ordinal, Time: time.Now(), Stats: b.MemoryStats(),
		Blocks: []MemoryBlock{}, Events: []MemoryEvent{}}
	ids := map[uint64]uint64{} // device address -> Buffer ID
	b.store.mu.RLock()
	b.store.table.each(func(id uint64, e *residentEntry) {
		ids[e.ptr] = id
		s.Blocks = append(s.Blocks, MemoryBlock{Buffer: id, Addr: e.ptr, Requested: uint64(e.n), Size: e.alloc.Size()})
	})
	b.store.mu.RUnlock()
	r := b.devPool.History()
	if r == nil {
		return s
	}
	h := r.Snapshot()
	s.Recording, s.MaxEvents, s.Dropped = true, h.Max, h.Dropped
	frames := stackCache{}
	s.Blocks = s.Blocks[:0]
	for _, blk := range h.Live {
		mb := MemoryBlock{Buffer: ids[blk.Addr], Addr: blk.Addr, Requested: blk.Requested, Size: blk.Size,
			Op: blk.Op, Time: blk.Time, Stack: frames.get(blk.Stack)}
		if !blk.Time.IsZero() {
			mb.Age = s.Time.Sub(blk.Time)
		}
		s.Blocks = append(s.Blocks, mb)
	}
	s.Events = make([]MemoryEvent, len(h.Events))
	for i, e := range h.Events {
		s.Events[i] = MemoryEvent{Kind: MemoryEventKind(e.Kind.String()), Time: e.Time, Op: e.Op, Addr: e.Addr,
			Requested: e.Requested, Size: e.Size, Allocated: e.Allocated, Reserved: e.Reserved, Stack: frames.get(e.Stack)}
	}
	return s
}

// stackCache symbolizes each distinct recorded stack once; the recorder
// shares one slice between the events of one call site.
type stackCache map[*uintptr][]MemoryFrame

func (c stackCache) get(pcs []uintptr) []MemoryFrame {
	if len(pcs) == 0 {
		return nil
	}
	if f, ok := c[&pcs[0]]; ok {
		return f
	}
	var out []MemoryFrame
	for _, f := range memhist.Frames(pcs, libraryFrames, historyFrames) {
		out = append(out, MemoryFrame{Function: f.Function, File: f.File, Line: f.Line})
	}
	c[&pcs[0]] = out
	return out
}
