// Package hostmem owns a Backend's pinned (page-locked) host memory: the
// Pool of staging blocks in power-of-two buckets with its byte cap, the
// spare sets back-to-back readbacks get, the evictions of readback staging
// from the CPU caches after a call returned, the per-call Staging lease
// that gives every block back however the call ends, and the Registry of
// host ranges callers pinned themselves.
//
// It works on host memory, the driver's HostAlloc/HostFree/HostUnregister
// and callbacks: it must not import core, hold a Backend, queue device
// work or decide transfer policy (which readback evicts, how many workers
// copy). Errors are core's *errs.Error, with the caller's operation name.
package hostmem

import (
	"fmt"
	"log/slog"
	"math/bits"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/unfreed"
)

// Host is what a Pool needs of a driver (driver.Driver has it): page-locked
// host memory. A Host that also implements driver.CacheNotifier is told
// which blocks enter and leave the cache.
type Host interface {
	// HostAlloc allocates n > 0 bytes of page-locked host memory.
	HostAlloc(n uint64) ([]byte, error)
	// HostFree frees memory HostAlloc returned; p is its first byte.
	HostFree(p unsafe.Pointer) error
}

// Block is one page-locked host buffer a Pool lent. Its length is the
// whole bucket (a power of two) and its backing array is the memory
// HostAlloc returned. The zero value is "no block".
type Block struct {
	buf []byte
}

// Bytes returns the block's memory, the whole bucket.
func (b Block) Bytes() []byte { return b.buf }

// Size returns the block's length in bytes (its bucket; 0 for no block).
func (b Block) Size() int { return len(b.buf) }

// Config sets up a Pool.
type Config struct {
	// Cap is the most bytes of freed blocks the pool keeps cached.
	Cap uint64
	// Log receives repair and failed-free reports; nil discards them.
	Log *slog.Logger
	// Helpers runs evictions after the calls that hand their staging over
	// (EvictLater); nil: such blocks go back at once, unevicted.
	Helpers Helpers
	// SpareWindow is how soon after the end of a readback that found one
	// set of staging the next one must come for its bucket to get a
	// second set (DeferEviction); zero: DefaultSpareWindow.
	SpareWindow time.Duration
	// SpareRetry is how long after a spare allocation of a bucket failed
	// no other is tried (unless a Trim comes first); zero:
	// DefaultSpareRetry.
	SpareRetry time.Duration
	// EvictHook, when set (tests), is called with each part of a staging
	// region just before an eviction job evicts it; evictions then run
	// even where the processor cannot evict.
	EvictHook func(part []byte)
}

// Pool caches freed pinned host buffers in power-of-two buckets, so
// staging for uploads and readbacks does not pay for HostAlloc
// (page-locking is far slower than a device allocation) on every call. It
// bounds what it keeps: a byte cap over all buckets, bounded slots per
// bucket, and blocks returned are cached only in buckets a Lend has missed
// on. It is safe for concurrent use.
type Pool struct {
	drv    Host
	log    *slog.Logger
	cache  bucketCache[[]byte]
	notify driver.CacheNotifier // the driver's, or nil: told what enters and leaves the cache

	// allocated counts the bytes obtained from HostAlloc and not yet freed;
	// exact, repaired to zero with a logged error if a release would underflow.
	allocated accounting.Counter

	// unfreed holds blocks HostFree failed on that found no room in the
	// cache: still allocated and counted, freed again by the next Trim or
	// Close (retryUnfreed).
	unfreed *unfreed.List[[]byte]

	// evictions holds the blocks of readbacks whose staging is still being
	// evicted from the caches (evict.go).
	evictions
	helpers   Helpers
	evictHook func(part []byte)

	// use tracks each bucket's blocks for the spare rule (orderSpares).
	use [64]bucketUse
	// spares counts spare allocations running in the background; Trim,
	// Close and CachedBytes wait for them.
	spares      inflight
	spareWindow time.Duration
	spareRetry  time.Duration
}

// New returns an empty pool over drv, set up as cfg says.
func New(drv Host, cfg Config) *Pool {
	log := orDiscard(cfg.Log)
	p := &Pool{drv: drv, log: log, helpers: cfg.Helpers, evictHook: cfg.EvictHook,
		unfreed:     unfreed.New(func(b []byte) uint64 { return uint64(len(b)) }),
		spareWindow: cfg.SpareWindow, spareRetry: cfg.SpareRetry,
		cache: bucketCache[[]byte]{name: "pinned host pool", log: log, max: cfg.Cap}}
	p.notify, _ = drv.(driver.CacheNotifier)
	if p.spareWindow <= 0 {
		p.spareWindow = DefaultSpareWindow
	}
	if p.spareRetry <= 0 {
		p.spareRetry = DefaultSpareRetry
	}
	p.spares.cond.L = &p.spares.mu
	return p
}

// Lend returns a pinned block of at least n bytes: a cached one from n's
// bucket when there is one, otherwise a fresh HostAlloc of the whole
// bucket. Its contents are whatever the previous user left there; the
// caller gives it back with Return. n <= 0, a closed pool, a driver
// failure and an empty or wrongly sized buffer returned with success are
// errors named op; none of them changes the pool's accounting or leaks.
func (p *Pool) Lend(op string, n int) (Block, error) {
	size, idx, err := bucketFor(op, "pinned host allocation", n)
	if err != nil {
		return Block{}, err
	}
	buf, state := p.cache.pop(idx, size)
	for state == cacheMiss {
		ej, held := p.evictionOf(idx)
		if ej == nil {
			break
		}
		// A block of this size is being evicted: wait for it (helping),
		// then look again, unless another call took it first. A bucket
		// that keeps waiting gets spare blocks meanwhile.
		p.orderSpares(idx, size, held)
		ej.job.Wait()
		p.use[idx].waits.Add(1)
		buf, state = p.cache.pop(idx, size)
	}
	switch state {
	case cacheHit:
		if p.notify != nil {
			p.notify.HostReused(buf)
		}
		p.use[idx].checkOut()
		return Block{buf: buf}, nil
	case cacheClosed:
		return Block{}, errs.ClosedPool(op, "pinned host pool")
	}
	return p.alloc(op, n, size, idx)
}

// alloc is Lend's miss: a fresh HostAlloc of bucket idx (size bytes) for
// a request of n.
func (p *Pool) alloc(op string, n, size, idx int) (Block, error) {
	buf, err := p.drv.HostAlloc(uint64(size))
	if err != nil {
		e := errs.Driver(op, "HostAlloc", err)
		e.Detail = fmt.Sprintf("HostAlloc of a %d-byte bucket for a %d-byte request failed", size, n)
		return Block{}, e
	}
	if len(buf) == 0 {
		return Block{}, errs.NullSuccess(op, "HostAlloc")
	}
	if len(buf) != size {
		// The driver handed back memory we did not ask for: free it rather
		// than guess how much of it is usable.
		_ = p.freeBuf(buf, "HostAlloc returned the wrong length")
		return Block{}, errs.New(op, errs.KindDriver,
			fmt.Sprintf("HostAlloc of %d bytes returned %d bytes", size, len(buf)),
			"the driver misbehaved; report it with the driver version, and retry the call")
	}
	if err := p.allocated.Add(uint64(size)); err != nil {
		_ = p.freeBuf(buf, "after the allocated-bytes count overflowed")
		e := errs.New(op, errs.KindBudget,
			fmt.Sprintf("pinned host pool live bytes cannot grow by %d", size),
			"free pinned staging before requesting more")
		e.Err = err
		return Block{}, e
	}
	p.use[idx].live.Add(1)
	p.use[idx].checkOut()
	return Block{buf: buf}, nil
}

// Return gives back b, which Lend handed out. It is cached when its bucket
// has a free slot and the byte cap allows; otherwise it is freed with
// HostFree, whose failure is logged (the block is then kept, counted, for
// the next Trim or Close). The caller must not touch b's memory
// afterwards. The zero block is ignored; a block whose length is not a
// bucket this pool lends is freed.
func (p *Pool) Return(b Block) {
	p.checkIn(b)
	p.keep(b)
}

// checkIn counts b as no longer held by a call.
func (p *Pool) checkIn(b Block) {
	if size := len(b.buf); size > 0 && size&(size-1) == 0 {
		p.use[bits.TrailingZeros(uint(size))].out.Add(-1)
	}
}

// keep caches or frees b, as Return says, without counting it as given
// back by a call (an eviction job's blocks were counted when the job took
// them).
func (p *Pool) keep(b Block) {
	size := len(b.buf)
	if size == 0 {
		return
	}
	if size&(size-1) != 0 {
		p.log.Error("pinned host pool: put of a block whose length is not a power of two; freeing it",
			"len", size)
		p.release(b.buf, "its length is not a bucket")
		return
	}
	// Told before the push: once pushed, another goroutine may pop it.
	if p.notify != nil {
		p.notify.HostCached(b.buf)
	}
	if !p.cache.push(bits.TrailingZeros(uint(size)), size, b.buf) {
		p.release(b.buf, "its bucket is full, unknown or over the byte cap")
	}
}

// release frees buf for real and removes it from the allocated count; a
// block HostFree fails on stays counted, kept for a later retry.
func (p *Pool) release(buf []byte, why string) {
	if p.freeBuf(buf, why) != nil {
		p.unfreed.Keep(buf)
		return
	}
	p.freed(buf)
}

// freed accounts for buf, freed by HostFree.
func (p *Pool) freed(buf []byte) {
	subOrRepair(&p.allocated, uint64(len(buf)), p.log, "pinned host pool allocated bytes")
	if size := len(buf); size&(size-1) == 0 {
		p.use[bits.TrailingZeros(uint(size))].live.Add(-1)
	}
}

// retryUnfreed frees the blocks an earlier HostFree failed on and returns
// the first failure; blocks that fail again stay kept.
func (p *Pool) retryUnfreed(op string) error {
	return p.unfreed.Retry(func(buf []byte) error {
		if err := p.freeBuf(buf, "retrying a failed free"); err != nil {
			return errs.Driver(op, "HostFree", err)
		}
		p.freed(buf)
		return nil
	})
}

// UnfreedBlocks returns how many blocks, and bytes, HostFree failed on and
// are kept for a retry by the next Trim or Close.
func (p *Pool) UnfreedBlocks() (n int, bytes uint64) { return p.unfreed.Count() }

// freeBuf calls HostFree on buf's first byte and logs a failure.
func (p *Pool) freeBuf(buf []byte, why string) error {
	if err := p.drv.HostFree(unsafe.Pointer(&buf[0])); err != nil {
		p.log.Error("pinned host pool: HostFree failed", "len", len(buf), "why", why, "err", err)
		return err
	}
	return nil
}

// CachedBytes returns the bytes held in the free lists, once every block
// being evicted is back in them and every spare being allocated is in.
func (p *Pool) CachedBytes() uint64 {
	p.settleEvictions()
	p.spares.wait()
	return p.cache.cached.Load()
}

// ReservedBytes returns the bytes obtained from HostAlloc and not yet
// freed: blocks lent, cached, being evicted or kept after a failed free.
func (p *Pool) ReservedBytes() uint64 { return p.allocated.Load() }

// Cap returns the most bytes the pool keeps cached.
func (p *Pool) Cap() uint64 { return p.cache.max }

// Trim frees every cached block (and retries those an earlier HostFree
// failed on), once every eviction and spare allocation has ended; a block
// HostFree fails on goes back into the cache, or, without room there, is
// kept for the next Trim or Close, counted either way. The first failure
// is returned, named op.
func (p *Pool) Trim(op string) error {
	p.settleEvictions()
	p.spares.wait()
	// Freeing pinned memory may be what a failed spare lacked: the next
	// readback of any size may try again at once.
	for i := range p.use {
		p.use[i].failed.Store(0)
	}
	first := p.retryUnfreed(op)
	for _, e := range p.cache.drain() {
		if err := p.freeBuf(e.v, "trimming the pool"); err != nil {
			if !p.cache.push(bitsIndex(len(e.v)), len(e.v), e.v) {
				p.unfreed.Keep(e.v)
			}
			if first == nil {
				first = errs.Driver(op, "HostFree", err)
			}
			continue
		}
		p.freed(e.v)
	}
	return first
}

// Close frees every cached block (and retries those an earlier HostFree
// failed on) and refuses further Lends; blocks returned later are freed at
// once. A block HostFree fails on stays allocated and counted, kept for the
// next Close. It returns the first HostFree failure (every block is still
// attempted). Calling it again retries only the kept blocks.
func (p *Pool) Close() error {
	const op = "close pinned host pool"
	p.settleEvictions()
	p.spares.wait()
	first := p.retryUnfreed(op)
	for _, e := range p.cache.closeCache() {
		if err := p.freeBuf(e.v, "closing the pool"); err != nil {
			p.unfreed.Keep(e.v)
			if first == nil {
				first = errs.Driver(op, "HostFree", err)
			}
			continue
		}
		p.freed(e.v)
	}
	return first
}
