package core

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
)

// Buffer is a handle to a resident device buffer: its id and its length in
// bytes. It is a comparable value, safe to copy and to use as a map key. Ids
// come from one process-wide counter, are never reused and never wrap, so a
// Buffer from another Backend, or one already freed, is never mistaken for a
// live one of this Backend.
type Buffer struct {
	ID  uint64
	Len int
}

// handleIDs hands out Buffer ids for every Backend in the process; 0 is
// never handed out, so the zero Buffer is always unknown.
var handleIDs accounting.Counter

// residentEntry is one live resident buffer.
type residentEntry struct {
	ptr   uint64
	n     int
	alloc devmem.Block // the device block from the pool
	owned bool         // an OptimizerDispatcher's: Backend.Free refuses it (set before insertion, then read-only)
	// static marks a buffer of a static upload set: uploads, clears and
	// fills refuse it. The dispatcher sets it once the set's payloads are
	// in, and rekey clears it when the buffer returns to the free pool.
	static atomic.Bool
	// inflight counts uses by unfinished work. It is changed atomically while
	// store.mu is held shared (pins) or without the lock (releases), and read
	// while store.mu is held exclusively, which excludes new pins: that is
	// what makes Free's check-then-remove safe.
	inflight atomic.Int64
	// graphs counts the uses of inflight that open Graphs hold, so Free
	// can name Graph.Close (graphHold).
	graphs atomic.Int64
}

// residentStore is the resident table and its byte accounting.
type residentStore struct {
	// mu guards table (membership). Lookups and pins hold it shared;
	// inserts, removals and in-flight totals hold it exclusively.
	mu    sync.RWMutex
	table handleTable
	// batches holds the buffers of synchronous transfer calls in progress
	// (batchpin.go); an entry's uses are inflight plus its occurrences there.
	batches batchPins
	// bytes is the sum of the lengths in table (and of allocations being
	// inserted): the bytes callers asked for. The budget is enforced by the
	// device pool over the rounded bytes (memory.go); bytes is atomic so it
	// is read without mu.
	bytes accounting.Counter
	// unfreed holds the buffers whose free failed at Close, still
	// allocated and counted in bytes, for a later Close to retry
	// (closeleft.go). Guarded by mu.
	unfreed []*residentEntry
	// peak is the highest value of bytes since Open or
	// ResetPeakMemoryStats (MemoryStats.PeakAllocated).
	peak atomic.Uint64

	// Set by init and read-only after: the device pool buffers come from,
	// the log for accounting repairs, the driver's cache notifier (or nil),
	// and the largest length served from a size class.
	dev       *devmem.Pool
	log       *slog.Logger
	notify    CacheNotifier
	poolLimit int
}

func (s *residentStore) init(dev *devmem.Pool, log *slog.Logger, notify CacheNotifier, poolLimit int) {
	s.dev, s.log, s.notify, s.poolLimit = dev, log, notify, poolLimit
}

// lookup validates h against the table; callers hold mu (either mode).
// It returns *Error (not error) so batch callers can prefix the item index;
// check it against nil before converting it to error.
func (s *residentStore) lookup(op string, h Buffer) (*residentEntry, *Error) {
	e := s.table.get(h.ID)
	if e == nil {
		return nil, s.unknownHandle(op, h)
	}
	if e.n != h.Len {
		return nil, newError(op, KindUnknownHandle,
			fmt.Sprintf("handle %d says %d bytes but the buffer has %d bytes", h.ID, h.Len, e.n),
			"use the Buffer value Alloc returned, unmodified")
	}
	return e, nil
}

// lookupWritable is lookup for a call that writes h's bytes from the host
// or by memset: a buffer of a static upload set is refused with ErrOwned.
func (s *residentStore) lookupWritable(op string, h Buffer) (*residentEntry, *Error) {
	e, err := s.lookup(op, h)
	if err == nil && e.static.Load() {
		return nil, staticWrite(op, h)
	}
	return e, err
}

// staticWrite reports a write into a buffer of a static upload set.
func staticWrite(op string, h Buffer) *Error {
	return newError(op, KindOwned,
		fmt.Sprintf("handle %d (%d bytes) belongs to a static upload set, whose contents are immutable", h.ID, h.Len),
		"write into a buffer from Alloc or OptimizerDispatcher.Alloc instead; a static set's buffers may only be read")
}

// inflightTotal sums the in-flight uses over the table; it takes mu
// exclusively so no pin can start while it counts.
func (s *residentStore) inflightTotal() (refs int64, handles int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	batched := s.batches.counts()
	s.table.each(func(_ uint64, e *residentEntry) {
		if n := e.inflight.Load() + batched[e]; n > 0 {
			refs += n
			handles++
		}
	})
	return refs, handles
}

// rebuildBytes sets the byte accounting to the sum over the live table. It is
// the repair for an accounting release that would have gone below zero.
func (s *residentStore) rebuildBytes(op string, released uint64) {
	s.mu.Lock()
	var total uint64
	s.table.each(func(_ uint64, e *residentEntry) {
		total += uint64(e.n) // lengths are positive ints; their sum is bounded by device memory
	})
	s.bytes.Store(total)
	s.mu.Unlock()
	s.log.Error("resident byte accounting would have gone below zero; rebuilt from the live table",
		"op", op, "released", released, "rebuilt", total)
}

// releaseBytes returns n reserved bytes to the budget, repairing the
// accounting from the live table if it would underflow.
func (s *residentStore) releaseBytes(op string, n uint64) {
	if s.bytes.SubOrRepair(n) {
		s.rebuildBytes(op, n)
	}
}

// notePeak raises the allocated peak to the current resident bytes.
func (s *residentStore) notePeak() {
	now := s.bytes.Load()
	for {
		p := s.peak.Load()
		if now <= p || s.peak.CompareAndSwap(p, now) {
			return
		}
	}
}

// Alloc allocates an n-byte buffer on the device and returns its handle,
// which every transfer and dispatch verb accepts until Free. The contents
// are unspecified: Upload into it or clear it before reading. n must be
// positive. Memory comes from the Backend's device cache first: a buffer up
// to the cache's class limit reserves n rounded up to its size class (less
// than 1/8 more) and is served without any driver call when a freed block of
// that class is cached; a larger one reserves exactly n. The bytes reserved,
// cached ones included, never exceed 9/10 of device memory, and a new block
// from the driver takes at most 9/10 of its live free memory. When the
// allocation does not fit, cached blocks are given back to the driver and it
// is tried again before it fails with ErrBudget. A failure holds nothing.
func (b *Backend) Alloc(n int) (Buffer, error) {
	return b.allocateResident("Alloc", n, false)
}

// allocateResident is Alloc under the caller's op; owned marks
// the buffer as an OptimizerDispatcher's.
func (b *Backend) allocateResident(op string, n int, owned bool) (Buffer, error) {
	if err := b.enter(op); err != nil {
		return Buffer{}, err
	}
	defer b.exit()
	if n <= 0 {
		return Buffer{}, newError(op, KindInvalidArgument,
			fmt.Sprintf("requested %d bytes", n), "request at least 1 byte")
	}
	h, err := b.store.allocate(op, n, owned)
	if err != nil {
		return Buffer{}, err
	}
	b.tel.ResidentAllocBytes.Add(uint64(n))
	return h, nil
}

// allocate takes an n-byte (n > 0) block from the device pool and enters it
// in the table under a fresh id; owned marks it an OptimizerDispatcher's.
// A failure holds nothing.
func (s *residentStore) allocate(op string, n int, owned bool) (Buffer, error) {
	a, err := s.dev.Alloc(op, n, s.usePool(n))
	if err != nil {
		return Buffer{}, err
	}
	e := &residentEntry{n: n, ptr: a.Ptr(), alloc: a, owned: owned}
	id, err := handleIDs.Next()
	if err == nil {
		err = s.bytes.Add(uint64(n))
	}
	if err != nil {
		s.dev.FreeOrKeep(a)
		return Buffer{}, newError(op, KindBudget, "the process-wide handle id space or the resident byte count is exhausted: "+err.Error(),
			"restart the process; handle ids are never reused")
	}
	s.notePeak()
	s.mu.Lock()
	s.table.put(id, e)
	s.mu.Unlock()
	return Buffer{ID: id, Len: n}, nil
}

// usePool reports whether an n-byte resident buffer is served from a size
// class (and so from the cache), rather than at its exact size.
func (s *residentStore) usePool(n int) bool {
	return s.poolLimit > 0 && n <= s.poolLimit
}

// freeDevice gives an entry's device memory back to the pool, which caches
// it or frees it. A driver failure is returned (and logged); the memory is
// then still allocated.
func (s *residentStore) freeDevice(op string, e *residentEntry) error {
	return s.dev.Free(op, e.alloc)
}

// Free frees a buffer from Alloc; its handle is unknown from then on, and
// since handles are never reused it can never reach another buffer. Free
// refuses, changing nothing: unknown, foreign, already freed and modified
// handles (ErrUnknownHandle); buffers bound to unfinished work such as a
// Pending or a Graph (ErrInFlight); and buffers an OptimizerDispatcher owns
// (ErrOwned: free those with OptimizerDispatcher.Free). If the driver fails
// to free the memory the buffer stays live and the call can be retried.
func (b *Backend) Free(h Buffer) error {
	return b.freeResident("Free", h, false)
}

// freeResident is Free under the caller's op; owner is true when an
// OptimizerDispatcher frees a buffer it owns.
func (b *Backend) freeResident(op string, h Buffer, owner bool) error {
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	b.store.mu.Lock()
	e, err := b.store.lookup(op, h)
	if err != nil {
		b.store.mu.Unlock()
		return err
	}
	if e.owned && !owner {
		b.store.mu.Unlock()
		return newError(op, KindOwned,
			fmt.Sprintf("handle %d (%d bytes) belongs to an optimizer dispatcher (a live id, its free pool or its static cache)", h.ID, h.Len),
			"free it with OptimizerDispatcher.Free, release its static set with ReleaseStaticUploads, or let OptimizerDispatcher.Close free it")
	}
	if e.inflight.Load() > 0 && b.launch.QuarantinedRefs() > 0 {
		// (Only inflight: the quarantine never holds a synchronous call's list.)
		// The quarantine may be what holds it: retry it, then look again.
		b.store.mu.Unlock()
		b.launch.RetryQuarantine()
		b.store.mu.Lock()
		if e, err = b.store.lookup(op, h); err != nil {
			b.store.mu.Unlock()
			return err
		}
	}
	if n := b.store.uses(e); n > 0 {
		b.store.mu.Unlock()
		return inFlightFree(op, h, n, e.graphs.Load())
	}
	b.store.table.del(h.ID)
	b.store.mu.Unlock()

	// The driver call runs without the store lock; on failure the entry goes
	// back (ids are never reused, so nothing can have taken its place).
	if err := b.store.freeDevice(op, e); err != nil {
		b.store.mu.Lock()
		b.store.table.put(h.ID, e)
		b.store.mu.Unlock()
		return err
	}
	b.store.releaseBytes(op, uint64(e.n))
	return nil
}

// ResidentDevicePtr returns the device address of a resident buffer, for
// callers that pass it to their own kernels. The address stays valid until
// the buffer is freed.
func (b *Backend) ResidentDevicePtr(h Buffer) (uint64, error) {
	const op = "ResidentDevicePtr"
	if err := b.enter(op); err != nil {
		return 0, err
	}
	defer b.exit()
	b.store.mu.RLock()
	defer b.store.mu.RUnlock()
	e, err := b.store.lookup(op, h)
	if err != nil {
		return 0, err
	}
	return e.ptr, nil
}

// rekeyOwned moves an idle dispatcher-owned buffer to a fresh handle id and
// clears its static mark: the dispatcher pools a freed buffer under the new
// handle, so the one its caller held is unknown from then on and a stale
// copy can never reach the buffer's next owner. It refuses, changing
// nothing, a buffer that is not live (ErrUnknownHandle, also once the
// Backend closed) and one that unfinished work still uses (ErrInFlight).
// The dispatcher calls it with its own lock held, on its hot path: it takes
// only the store's lock.
func (s *residentStore) rekeyOwned(op string, h Buffer) (Buffer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, herr := s.lookup(op, h)
	if herr != nil {
		return Buffer{}, herr
	}
	if uses := s.uses(e); uses > 0 {
		// Work the Backend still holds the buffer for (e.g. a failed
		// transfer's quarantined copy) may write into it: pooling it would
		// hand that memory to the next Alloc.
		return Buffer{}, newError(op, KindInFlight,
			fmt.Sprintf("handle %d is used by unfinished Backend work (%s)", h.ID, mentions(uses)),
			"wait for the pending work using it; the dispatcher frees it at Close")
	}
	id, err := handleIDs.Next()
	if err != nil {
		return Buffer{}, &Error{Op: op, Kind: KindBudget, Detail: "the process-wide handle id space is exhausted",
			Fix: "restart the process; handle ids are never reused", Err: err}
	}
	s.table.del(h.ID)
	s.table.put(id, e)
	e.static.Store(false)
	return Buffer{ID: id, Len: h.Len}, nil
}

// markStatic marks the live buffers bufs as a static upload set's, whose
// uploads, clears and fills are refused from then on.
func (s *residentStore) markStatic(bufs []Buffer) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range bufs {
		if e := s.table.get(h.ID); e != nil {
			e.static.Store(true)
		}
	}
}

// inflightUses returns how many uses of unfinished work hold h (queued
// through the Backend directly, e.g. RunAsync on a static set's Bufs), 0
// for a buffer that is not live.
func (s *residentStore) inflightUses(h Buffer) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.table.get(h.ID); e != nil {
		return s.uses(e)
	}
	return 0
}

// cacheNotifier returns drv's CacheNotifier, or nil.
func cacheNotifier(drv Driver) CacheNotifier {
	n, _ := drv.(CacheNotifier)
	return n
}

// notifyCached reports a resident buffer entering (cached) or leaving the
// optimizer dispatcher's free pool to the driver's CacheNotifier. It costs
// one nil check when the driver has none.
func (s *residentStore) notifyCached(h Buffer, cached bool) {
	if s.notify == nil {
		return
	}
	s.mu.RLock()
	e := s.table.get(h.ID)
	s.mu.RUnlock()
	if e == nil {
		return
	}
	if cached {
		s.notify.MemCached(e.ptr, uint64(e.n))
	} else {
		s.notify.MemReused(e.ptr, uint64(e.n))
	}
}

// releaseAll frees every resident buffer; Close calls it with life held
// exclusively. Buffers the quarantine holds in flight are left allocated
// (SettleQuarantine reports them); a buffer the driver fails to free moves
// to unfreed, still counted. It continues past failures and returns the
// first.
func (s *residentStore) releaseAll(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	var left uint64
	s.table.each(func(_ uint64, e *residentEntry) {
		if s.uses(e) == 0 {
			if err := s.freeDevice(op, e); err != nil {
				s.unfreed = append(s.unfreed, e)
				left += uint64(e.n)
				if first == nil {
					first = err
				}
			}
		}
	})
	s.table.clear()
	s.bytes.Store(left)
	return first
}
