// Package devmem owns a Backend's device memory: the Pool, a caching
// allocator (internal/alloc) over the driver's MemAlloc/MemFree with one
// budget over everything it reserves, which resident buffers, packed
// transfer staging and dispatch scratch all draw from, and Scratch, the
// set of device blocks one dispatch holds until it ends.
//
// It works on device addresses and a narrow Device interface: it must not
// import core, hold a Backend, queue device work or know what a block is
// used for. Errors are core's *errs.Error, with the caller's operation
// name.
package devmem

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/memhist"
	"github.com/vyre-go/vyrecuda/core/internal/unfreed"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/internal/alloc"
)

// Device is what a Pool needs of a driver (driver.Driver has it). A Device
// that also implements driver.CacheNotifier is told which blocks enter and
// leave the cache.
type Device interface {
	// MemGetInfo reports live free and total device memory in bytes.
	MemGetInfo() (free, total uint64, err error)
	// MemAlloc allocates n > 0 bytes of device memory.
	MemAlloc(n uint64) (uint64, error)
	// MemFree frees a pointer MemAlloc returned.
	MemFree(ptr uint64) error
}

// Block is one device block a Pool handed out: its address, the bytes the
// caller asked for and the allocator's block. The zero value is "no block".
type Block struct {
	ptr uint64
	n   int
	blk alloc.Block
}

// Ptr returns the block's device address (0 for no block).
func (b Block) Ptr() uint64 { return b.ptr }

// Len returns the bytes the caller asked for.
func (b Block) Len() int { return b.n }

// Size returns the bytes the block reserves: the request's size class, or
// its exact size.
func (b Block) Size() uint64 { return b.blk.Size }

// Config sets up a Pool.
type Config struct {
	// Total is the device's memory in bytes; the budget is 9/10 of it.
	Total uint64
	// MaxCached bounds the bytes of freed blocks kept for reuse.
	MaxCached uint64
	// MaxClassed is the largest request served from a size class (at
	// least 1); larger ones get exact blocks, never cached.
	MaxClassed int
	// Log receives failed-free reports; nil discards them.
	Log *slog.Logger
	// BeforeFree, when set, runs before every block goes back to the
	// driver (the Backend waits there for work it did not fence).
	BeforeFree func()
}

// Pool is a Backend's device memory: a caching allocator over a Device,
// with one budget over everything it reserves, so a freed block of any use
// serves the others. It is safe for concurrent use.
type Pool struct {
	log   *slog.Logger
	cache *alloc.Cache

	// unfreed holds blocks whose free failed in FreeOrKeep (no caller to
	// hand the failure to): still allocated and counted as live by the
	// cache, freed again by the next Trim or Close.
	unfreed *unfreed.List[Block]

	// hist records the pool's events while memory history is on; nil
	// (the common case) costs one atomic load per Alloc and Free.
	hist atomic.Pointer[memhist.Recorder]
}

// device adapts a Device to the allocator's Device and FreeMemoryReader.
type device struct {
	drv    Device
	before func()
}

func (d device) Alloc(n uint64) (uint64, error) { return d.drv.MemAlloc(n) }

func (d device) Free(ptr uint64) error {
	if d.before != nil {
		d.before()
	}
	return d.drv.MemFree(ptr)
}

// FreeMemory reads the live free memory; a report of 0 total bytes is the
// driver returning success with nothing filled in.
func (d device) FreeMemory() (uint64, error) {
	free, total, err := d.drv.MemGetInfo()
	if err == nil && total == 0 {
		err = errNullMemInfo
	}
	return free, err
}

// errNullMemInfo marks a MemGetInfo that succeeded with a total of 0.
var errNullMemInfo = errors.New("MemGetInfo reported 0 bytes in total")

// isOutOfMemory reports whether a driver error is CUDA's out-of-memory result.
func isOutOfMemory(err error) bool {
	var r cudaapi.Result
	return errors.As(err, &r) && r == cudaapi.CUDA_ERROR_OUT_OF_MEMORY
}

// New returns an empty pool over drv, set up as cfg says.
func New(drv Device, cfg Config) *Pool {
	acfg := alloc.Config{
		Budget:        accounting.ResidentTotalBudget(cfg.Total),
		MaxCached:     cfg.MaxCached,
		MaxClassed:    uint64(max(cfg.MaxClassed, 1)),
		IsOutOfMemory: isOutOfMemory,
	}
	if n, ok := drv.(driver.CacheNotifier); ok {
		acfg.OnCached, acfg.OnReused = n.MemCached, n.MemReused
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{log: log, unfreed: unfreed.New(func(b Block) uint64 { return b.blk.Size })}
	acfg.OnRetry = p.retried
	p.cache = alloc.New(device{drv: drv, before: cfg.BeforeFree}, acfg)
	return p
}

// SetHistory makes r (nil: none) record the pool's events from now on.
func (p *Pool) SetHistory(r *memhist.Recorder) { p.hist.Store(r) }

// History returns the Recorder set by SetHistory, or nil.
func (p *Pool) History() *memhist.Recorder { return p.hist.Load() }

// retried records an allocation that released cached blocks to try again.
// The op is not known down in the allocator; the event's stack says who.
func (p *Pool) retried(requested, released uint64) {
	if h := p.hist.Load(); h != nil {
		h.Released(memhist.Retry, "", requested, released)
	}
}

// Alloc returns a device block of at least n bytes: from n's size class
// when classed is true (served from the cache when it holds one), else of
// exactly n bytes. n <= 0, a closed pool, a refusal for lack of room
// (KindBudget) and a driver failure are errors named op; none of them
// holds anything.
func (p *Pool) Alloc(op string, n int, classed bool) (Block, error) {
	if n <= 0 {
		return Block{}, errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("device allocation request of %d bytes", n), "request at least 1 byte")
	}
	var blk alloc.Block
	var err error
	if classed {
		blk, err = p.cache.Alloc(uint64(n))
	} else {
		blk, err = p.cache.AllocExact(uint64(n))
	}
	if err != nil {
		var short *alloc.ShortError
		if h := p.hist.Load(); h != nil && errors.As(err, &short) {
			h.OOM(op, uint64(n), short.Size)
		}
		return Block{}, poolError(op, n, err)
	}
	if h := p.hist.Load(); h != nil {
		h.Alloc(op, blk.Ptr, uint64(n), blk.Size)
	}
	return Block{ptr: blk.Ptr, n: n, blk: blk}, nil
}

// Free gives b back and returns a driver failure named op, after which b
// is still allocated and the caller keeps it. The zero Block is ignored.
func (p *Pool) Free(op string, b Block) error {
	if b.ptr == 0 {
		return nil
	}
	if err := p.cache.Free(b.blk); err != nil {
		p.log.Error("freeing device memory failed", "op", op, "ptr", b.ptr, "bytes", b.blk.Size, "err", err)
		return poolError(op, b.n, err)
	}
	if h := p.hist.Load(); h != nil {
		h.Free(op, b.ptr, uint64(b.n), b.blk.Size)
	}
	return nil
}

// FreeOrKeep gives b back where no caller can take a failure (transfer
// staging, dispatch scratch): a failure is logged, and b is kept, still
// counted, for the next Trim or Close to free.
func (p *Pool) FreeOrKeep(b Block) {
	if p.Free("release device staging", b) != nil {
		p.unfreed.Keep(b)
	}
}

// retryUnfreed frees the blocks FreeOrKeep failed to free and returns the
// first failure; blocks that fail again stay kept.
func (p *Pool) retryUnfreed(op string) error {
	return p.unfreed.Retry(func(b Block) error { return p.Free(op, b) })
}

// UnfreedBlocks returns how many blocks, and bytes, FreeOrKeep failed to
// free and keeps for a retry.
func (p *Pool) UnfreedBlocks() (n int, bytes uint64) { return p.unfreed.Count() }

// CachedBytes returns the bytes of freed blocks the pool keeps.
func (p *Pool) CachedBytes() uint64 { return p.cache.Stats().Cached }

// ReservedBytes returns the device bytes the pool holds: blocks in use, at
// their class size, plus cached ones.
func (p *Pool) ReservedBytes() uint64 { return p.cache.Stats().Reserved }

// Stats returns the allocator's counters.
func (p *Pool) Stats() alloc.Stats { return p.cache.Stats() }

// Config returns the allocator's configuration, with defaults filled in.
func (p *Pool) Config() alloc.Config { return p.cache.Config() }

// ResetPeaks restarts the allocator's peak counters from their current
// values.
func (p *Pool) ResetPeaks() { p.cache.ResetPeaks() }

// Trim gives every cached block back to the driver, and retries the blocks
// FreeOrKeep failed to free (into the cache, when it has room). It returns
// the first failure, named op.
func (p *Pool) Trim(op string) error {
	rerr := p.retryUnfreed(op)
	h := p.hist.Load()
	var before uint64
	if h != nil {
		before = p.cache.Stats().Released
	}
	err := p.cache.Trim()
	if h != nil {
		h.Released(memhist.Trim, op, 0, p.cache.Stats().Released-before)
	}
	if err != nil {
		return poolError(op, 0, err)
	}
	return rerr
}

// Close trims the pool (retrying the blocks FreeOrKeep failed to free) and
// refuses later Allocs; blocks freed afterwards go straight to the driver.
// It returns the first driver failure.
func (p *Pool) Close() error {
	const op = "close device pool"
	if err := p.cache.Close(); err != nil {
		_ = p.retryUnfreed(op)
		return poolError(op, 0, err)
	}
	return p.retryUnfreed(op)
}

// poolError turns an allocator error into an *errs.Error for op.
func poolError(op string, n int, err error) *errs.Error {
	var short *alloc.ShortError
	var dev *alloc.DeviceError
	switch {
	case errors.As(err, &short):
		e := errs.New(op, errs.KindBudget, "device memory: "+short.Error(),
			"free unused resident buffers, shard the data, or use a device with more free memory")
		e.Err = short.Cause
		var r cudaapi.Result
		if errors.As(short.Cause, &r) {
			e.Code = r
		}
		return e
	case errors.As(err, &dev):
		call := map[string]string{"Alloc": "MemAlloc", "Free": "MemFree", "FreeMemory": "MemGetInfo"}[dev.Call]
		if errors.Is(dev.Err, errNullMemInfo) {
			return errs.NullSuccess(op, call)
		}
		e := errs.Driver(op, call, dev.Err)
		if n > 0 {
			e.Detail = fmt.Sprintf("%s failed for a %d-byte request", call, n)
		}
		return e
	case errors.Is(err, alloc.ErrNullBlock):
		return errs.NullSuccess(op, "MemAlloc")
	case errors.Is(err, alloc.ErrClosed):
		return errs.ClosedPool(op, "device allocation pool")
	}
	// ErrBadBlock and ErrZeroSize: the caller passed the allocator
	// something it never handed out; callers validate first, so this is a
	// bug in the Backend, reported rather than hidden.
	e := errs.New(op, errs.KindInvalidArgument, "device allocator: "+err.Error(),
		"report this as a bug in vyrecuda, with the calls that led to it")
	e.Err = err
	return e
}
