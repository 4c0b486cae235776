package core

import (
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/accounting"
)

// OptimizerOption configures an OptimizerDispatcher in NewOptimizerDispatcher.
type OptimizerOption func(*optimizerConfig)

type optimizerConfig struct {
	poolCap, staticCap       uint64
	poolCapSet, staticCapSet bool
}

// WithOptimizerPoolCap sets the most bytes of freed buffers the dispatcher's
// free pool keeps for reuse (default: 1/32 of device memory). Zero pools
// nothing: every Free frees for real.
func WithOptimizerPoolCap(bytes uint64) OptimizerOption {
	return func(c *optimizerConfig) { c.poolCap, c.poolCapSet = bytes, true }
}

// WithStaticCacheCap sets the most bytes of static upload sets the
// dispatcher's cache retains (default: 1/32 of device memory). Zero caches
// nothing: every acquisition uploads and every release frees.
func WithStaticCacheCap(bytes uint64) OptimizerOption {
	return func(c *optimizerConfig) { c.staticCap, c.staticCapSet = bytes, true }
}

// OptimizerDispatcher is the persistent fast path for a caller that
// allocates, uploads and dispatches against the same buffers many times:
// a pool of freed buffers that makes the next allocation of the same length
// a map pop instead of a driver allocation, and a content-addressed cache
// of immutable payloads (AcquireStaticUploads). The Buffers it hands out
// are ordinary handles: Upload, Download, Dispatch, Run, Capture and every
// other Backend verb accept them. The dispatcher owns them, so Backend.Free
// refuses them (ErrOwned); free them with the dispatcher's Free.
//
// Free does not free: it returns the buffer to a free list keyed by its
// exact length. A pooled buffer is never handed out for a smaller request:
// kernels bound to it assume its length is the declared one. The pool holds
// at most its byte cap; when a freed buffer would exceed it, the largest
// pooled sizes are freed for real first, and a buffer larger than the whole
// cap is freed at once. A freed handle is unknown to the Backend from then
// on, and every Alloc returns a handle never seen before, also when it
// reuses a pooled buffer, so a stale handle can never reach the buffer's
// next owner.
//
// An OptimizerDispatcher is safe for concurrent use.
type OptimizerDispatcher struct {
	b         *Backend
	poolCap   uint64
	staticCap uint64

	// mu guards every field below it: the handle table, the free pool and
	// its byte count, the static cache and the retired list. It is held
	// across the Backend's allocation and free calls (so table and Backend
	// never disagree) but never across a transfer, a launch or a fence:
	// those run through the Backend, which keeps their buffers in flight,
	// and Free and eviction refuse or skip buffers in flight. Lock order:
	// mu, then the Backend's own locks; the Backend never calls back into a
	// dispatcher.
	mu     sync.Mutex
	closed bool
	// ids holds every buffer handed out and not freed, by handle id:
	// buffers of Alloc and of static sets (cached or not). Every buffer
	// the dispatcher owns is in exactly one of ids, pool and retired.
	ids map[uint64]optBuf
	// pool holds freed buffers by exact length, under handles never handed
	// out (rekey). A list emptied by a pool hit
	// stays (keeping its capacity, so the hot alloc/free round trip does not
	// allocate) while the map has at most keepEmptyLists keys; eviction
	// prunes empty lists.
	pool        map[int][]Buffer
	pooledBytes uint64 // sum of the lengths in pool
	static      staticCache
	// retired holds buffers that eviction tried and failed to free (a driver
	// failure, or work the caller queued on them directly); Close retries.
	retired []Buffer
}

// optBuf is one handed-out buffer's entry in the table.
type optBuf struct {
	buf    Buffer
	static bool // belongs to a static set: Free refuses it; the Backend refuses writes
	busy   int  // uses by dispatcher calls running without mu (a cold static acquisition)
}

// keepEmptyLists bounds how many lengths keep an empty free list around.
const keepEmptyLists = 64

// OptimizerStats is a snapshot of what an OptimizerDispatcher holds.
type OptimizerStats struct {
	LiveIDs            int    // buffers from Alloc not yet freed
	PooledBuffers      int    // freed buffers kept for reuse
	PooledBytes        uint64 // their bytes
	PoolCap            uint64 // the free pool's byte cap
	StaticEntries      int    // static sets retained by the cache
	StaticCachedBytes  uint64 // their bytes
	StaticCap          uint64 // the static cache's byte cap
	StaticSetsAcquired int    // acquisitions not yet released
	RetiredBuffers     int    // buffers that could not be freed or pooled (a failed free, or held by unfinished Backend work), retried by Close
}

// NewOptimizerDispatcher builds a dispatcher over b. It allocates nothing
// until used. Its pool and static cache caps default to
// accounting.OptimizerPoolBudget of the device's memory (1/32) each.
func NewOptimizerDispatcher(b *Backend, opts ...OptimizerOption) (*OptimizerDispatcher, error) {
	const op = "NewOptimizerDispatcher"
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "backend is nil", "pass a Backend from core.Open")
	}
	if err := b.enter(op); err != nil {
		return nil, err
	}
	b.exit()
	var cfg optimizerConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	budget := accounting.OptimizerPoolBudget(b.DeviceInfo().TotalMemory)
	if !cfg.poolCapSet {
		cfg.poolCap = budget
	}
	if !cfg.staticCapSet {
		cfg.staticCap = budget
	}
	d := &OptimizerDispatcher{
		b: b, poolCap: cfg.poolCap, staticCap: cfg.staticCap,
		ids:  make(map[uint64]optBuf),
		pool: make(map[int][]Buffer),
	}
	d.static.init()
	return d, nil
}

// nilDispatcher reports a call on a nil *OptimizerDispatcher.
func nilDispatcher(op string) *Error {
	return newError(op, KindInvalidArgument, "the optimizer dispatcher is nil",
		"use the dispatcher core.NewOptimizerDispatcher returned, after checking its error")
}

func dispatcherClosed(op string) *Error {
	return newError(op, KindClosed, "the optimizer dispatcher is closed",
		"build a new one with core.NewOptimizerDispatcher")
}

// usable reports ErrClosed for a closed dispatcher or Backend; callers hold mu.
func (d *OptimizerDispatcher) usable(op string) error {
	if d.closed {
		return dispatcherClosed(op)
	}
	// A pool hit touches no Backend call, so ask the Backend directly: ids
	// of a closed Backend must not be handed out.
	if err := d.b.enter(op); err != nil {
		return err
	}
	d.b.exit()
	return nil
}

// notDispatcherBuffer reports a handle that is not a live buffer of the
// dispatcher.
func notDispatcherBuffer(op string, h Buffer) *Error {
	return newError(op, KindUnknownHandle,
		fmt.Sprintf("handle %d (%d bytes) is not a live buffer of this optimizer dispatcher", h.ID, h.Len),
		"use a Buffer returned by this dispatcher's Alloc and not yet freed")
}

// Alloc returns an n-byte buffer: a pooled buffer of exactly n bytes when
// there is one, else a new allocation through the Backend (with its budget
// checks). The handle is one never returned before. The contents are
// unspecified: clear or upload before reading. Every Backend verb accepts
// the buffer; free it with the dispatcher's Free, not Backend.Free.
func (d *OptimizerDispatcher) Alloc(n int) (Buffer, error) {
	return d.alloc("Alloc", n)
}

// alloc is Alloc under op.
func (d *OptimizerDispatcher) alloc(op string, n int) (Buffer, error) {
	if d == nil {
		return Buffer{}, nilDispatcher(op)
	}
	if n <= 0 {
		return Buffer{}, newError(op, KindInvalidArgument, fmt.Sprintf("requested %d bytes", n), "request at least 1 byte")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(op); err != nil {
		return Buffer{}, err
	}
	buf, _, err := d.takeLocked(op, n)
	if err != nil {
		return Buffer{}, err
	}
	d.ids[buf.ID] = optBuf{buf: buf}
	return buf, nil
}

// takeLocked pops an exact-length pooled buffer or allocates one.
func (d *OptimizerDispatcher) takeLocked(op string, n int) (buf Buffer, pooled bool, err error) {
	if list := d.pool[n]; len(list) > 0 {
		left, err := accounting.SubUint64(d.pooledBytes, uint64(n))
		if err != nil {
			return Buffer{}, false, accountingError(op, "free pool", err)
		}
		buf = list[len(list)-1]
		if len(list) == 1 && len(d.pool) > keepEmptyLists {
			delete(d.pool, n)
		} else {
			d.pool[n] = list[:len(list)-1]
		}
		d.pooledBytes = left
		d.b.store.notifyCached(buf, false)
		return buf, true, nil
	}
	buf, err = d.b.allocateResident(op, n, true)
	if err != nil {
		return Buffer{}, false, err
	}
	return buf, false, nil
}

// giveBackLocked undoes takeLocked on a failure path: a pooled buffer goes
// back to its list (restoring the pool exactly, without eviction), a fresh
// one is freed through the Backend.
func (d *OptimizerDispatcher) giveBackLocked(op string, buf Buffer, pooled bool) {
	if pooled {
		// Straight back onto its list: mu was held since it was taken, so
		// this restores the pool exactly, cap and all.
		if next, err := accounting.AddUint64(d.pooledBytes, uint64(buf.Len)); err == nil {
			d.b.store.notifyCached(buf, true)
			d.pooledBytes = next
			d.pool[buf.Len] = append(d.pool[buf.Len], buf)
			return
		}
	}
	if err := d.b.freeResident(op, buf, true); err != nil {
		d.retire(op, buf, err)
	}
}

// retire keeps a buffer that could not be freed for Close to retry; callers hold mu.
func (d *OptimizerDispatcher) retire(op string, buf Buffer, err error) {
	d.b.log.Error("optimizer dispatcher could not free a buffer; Close retries",
		"op", op, "id", buf.ID, "bytes", buf.Len, "err", err)
	d.retired = append(d.retired, buf)
}

func accountingError(op, what string, err error) *Error {
	return &Error{Op: op, Kind: KindBudget, Detail: what + " byte accounting is out of step", Err: err,
		Fix: "report this as a bug; the dispatcher's accounting no longer matches its tables"}
}

// Free gives h back to the free pool for reuse by the next Alloc of the
// same length, evicting the largest pooled buffers first when the pool
// would exceed its cap; a buffer larger than the cap is freed at once.
// The handle is unknown from then on, to the dispatcher and the Backend
// alike. Free refuses, changing nothing: handles that are not live buffers
// of this dispatcher's Alloc (ErrUnknownHandle), buffers of static sets
// (ErrInvalidArgument: release the set instead) and buffers in use by
// unfinished work (ErrInFlight).
func (d *OptimizerDispatcher) Free(h Buffer) error {
	return d.free("Free", h)
}

// free is Free under op.
func (d *OptimizerDispatcher) free(op string, h Buffer) error {
	if d == nil {
		return nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(op); err != nil {
		return err
	}
	e, ok := d.ids[h.ID]
	if !ok || e.buf != h {
		return notDispatcherBuffer(op, h)
	}
	if e.static {
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("handle %d belongs to a static upload set", h.ID),
			"release the set with ReleaseStaticUploads instead")
	}
	if e.busy > 0 {
		return runningCalls(op, e)
	}
	// putLocked refuses a buffer that unfinished work uses, and one gone
	// from the Backend behind the dispatcher's back, changing nothing.
	err := d.putLocked(op, e.buf)
	if err != nil && isKind(err, KindInFlight) && d.b.launch.QuarantinedRefs() > 0 {
		// The quarantine may be what holds it: retry it, then try again.
		d.b.launch.RetryQuarantine()
		err = d.putLocked(op, e.buf)
	}
	if err != nil {
		return err
	}
	delete(d.ids, h.ID)
	return nil
}

// runningCalls reports a buffer that running dispatcher calls use.
func runningCalls(op string, e optBuf) *Error {
	return newError(op, KindInFlight,
		fmt.Sprintf("handle %d is used by %d running call(s)", e.buf.ID, e.busy),
		"free it after the calls using it have returned")
}

// checkIdle refuses a buffer a running call or unfinished work still uses.
func (d *OptimizerDispatcher) checkIdle(op string, e optBuf) error {
	if e.busy > 0 {
		return runningCalls(op, e)
	}
	if n := d.idleAfterQuarantine(e.buf); n > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("handle %d is used by unfinished work (%s)", e.buf.ID, mentions(n)),
			"wait for the pending work using it before freeing it")
	}
	return nil
}

// putLocked pools buf under a fresh handle, or frees it when it alone
// exceeds the cap. It fails, changing nothing, when the Backend still holds
// buf for unfinished work (a failed transfer's quarantined copy may still
// write into it) or when the real free fails; callers retire what is
// refused here. With the Backend closed the buffer is gone with it and is
// just forgotten.
func (d *OptimizerDispatcher) putLocked(op string, buf Buffer) error {
	n := uint64(buf.Len)
	if n > d.poolCap {
		return d.b.freeResident(op, buf, true)
	}
	buf, err := d.b.store.rekeyOwned(op, buf)
	if err != nil {
		if cerr := d.b.enter(op); cerr != nil {
			return nil // the Backend closed: the buffer is gone with it
		}
		d.b.exit()
		return err
	}
	// n <= cap, so cap-n cannot wrap; evict until the buffer fits.
	for d.pooledBytes > d.poolCap-n {
		if !d.evictLargestPooledLocked(op) {
			break
		}
	}
	next, err := accounting.AddUint64(d.pooledBytes, n)
	if err != nil || next > d.poolCap {
		// Unreachable while pooledBytes matches the lists; free for real
		// rather than exceed the cap.
		return d.b.freeResident(op, buf, true)
	}
	d.b.store.notifyCached(buf, true)
	d.pool[buf.Len] = append(d.pool[buf.Len], buf)
	d.pooledBytes = next
	return nil
}

// evictLargestPooledLocked frees one buffer of the largest pooled length;
// false when the pool is empty. A buffer the Backend refuses to free leaves
// the pool's accounting and is retired.
func (d *OptimizerDispatcher) evictLargestPooledLocked(op string) bool {
	largest := 0
	for n, list := range d.pool {
		if len(list) == 0 {
			delete(d.pool, n)
			continue
		}
		largest = max(largest, n)
	}
	if largest == 0 {
		return false
	}
	left, err := accounting.SubUint64(d.pooledBytes, uint64(largest))
	if err != nil {
		// The lists say more bytes than the counter: rebuild it from them.
		d.b.log.Error("optimizer pool byte accounting out of step; rebuilt from the free lists", "op", op, "err", err)
		d.pooledBytes = d.poolListBytes()
		left = d.pooledBytes - uint64(largest)
	}
	list := d.pool[largest]
	buf := list[len(list)-1]
	if len(list) == 1 {
		delete(d.pool, largest)
	} else {
		d.pool[largest] = list[:len(list)-1]
	}
	d.pooledBytes = left
	if err := d.b.freeResident(op, buf, true); err != nil {
		d.retire(op, buf, err)
	}
	return true
}

func (d *OptimizerDispatcher) poolListBytes() uint64 {
	var total uint64
	for n, list := range d.pool {
		total += uint64(n) * uint64(len(list)) // bounded by device memory
	}
	return total
}

// Stats returns a snapshot of what the dispatcher holds.
func (d *OptimizerDispatcher) Stats() OptimizerStats {
	if d == nil {
		return OptimizerStats{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := OptimizerStats{
		PooledBytes: d.pooledBytes, PoolCap: d.poolCap,
		StaticEntries: len(d.static.entries), StaticCachedBytes: d.static.bytes,
		StaticCap: d.staticCap, StaticSetsAcquired: len(d.static.sets),
		RetiredBuffers: len(d.retired),
	}
	for _, list := range d.pool {
		s.PooledBuffers += len(list)
	}
	for _, e := range d.ids {
		if !e.static {
			s.LiveIDs++
		}
	}
	return s
}

// Close frees every buffer the dispatcher owns: live buffers, pooled buffers,
// static sets (cached or not, acquired or not) and retired buffers, so the
// Backend's resident bytes return to where they were before the dispatcher
// allocated anything. Its handles and static sets are unknown afterwards; later
// calls return ErrClosed. Close refuses with ErrInFlight, changing nothing,
// while a running call or unfinished Backend work uses any of its buffers.
// Acquired static sets do not block it: like Backend.Close with live
// buffers, closing the owner ends every handle it gave out. Frees continue
// past driver failures and the first is returned; a buffer that failed stays
// with the Backend, which frees it when it closes. When the Backend is
// already closed its buffers are gone with it and Close just forgets them.
func (d *OptimizerDispatcher) Close() error {
	const op = "Close"
	if d == nil {
		return nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dispatcherClosed(op)
	}
	for _, e := range d.ids {
		if err := d.checkIdle(op, e); err != nil {
			return err
		}
	}
	d.closed = true
	var first error
	free := func(buf Buffer) {
		err := d.b.freeResident(op, buf, true)
		if err != nil && !isKind(err, KindClosed) && first == nil {
			first = err
		}
	}
	for _, e := range d.ids {
		free(e.buf)
	}
	for _, list := range d.pool {
		for _, buf := range list {
			free(buf)
		}
	}
	for _, buf := range d.retired {
		free(buf)
	}
	d.ids, d.pool, d.retired = map[uint64]optBuf{}, map[int][]Buffer{}, nil
	d.pooledBytes = 0
	d.static.init()
	return first
}

func isKind(err error, k Kind) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == k
}
