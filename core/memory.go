package core

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/internal/alloc"
)

// deviceAlloc is one device block handed out by a devicePool: its address,
// the bytes the caller asked for (n <= blk.Size) and the allocator's block.
// The zero value is "no allocation".
type deviceAlloc struct {
	ptr uint64
	n   int
	blk alloc.Block
}

// devicePool is the Backend's device memory: a caching allocator
// (internal/alloc) over the Driver, with one budget over everything it
// reserves. Resident buffers, packed-transfer staging and dispatch scratch
// all come from it, so a freed block of any of them serves the others.
type devicePool struct {
	log   *slog.Logger
	cache *alloc.Cache

	// unfreed holds staging and scratch blocks whose free failed in put
	// (no caller to hand the failure to): still allocated and counted as
	// live by the cache, freed again by the next trim or close.
	unfreed unfreedList[deviceAlloc]
}

// poolDevice adapts a Driver to the allocator's Device and FreeMemoryReader.
type poolDevice struct{ drv Driver }

func (d poolDevice) Alloc(n uint64) (uint64, error) { return d.drv.MemAlloc(n) }
func (d poolDevice) Free(ptr uint64) error          { return d.drv.MemFree(ptr) }

// FreeMemory reads the live free memory; a report of 0 total bytes is the
// driver returning success with nothing filled in.
func (d poolDevice) FreeMemory() (uint64, error) {
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

// newDevicePool returns an empty pool over drv. Its budget is 9/10 of the
// device's total memory; maxCached bounds the cached bytes and maxClassed
// the largest request served in a size class.
func newDevicePool(drv Driver, total, maxCached uint64, maxClassed int, log *slog.Logger) *devicePool {
	cfg := alloc.Config{
		Budget:        accounting.ResidentTotalBudget(total),
		MaxCached:     maxCached,
		MaxClassed:    uint64(max(maxClassed, 1)),
		IsOutOfMemory: isOutOfMemory,
	}
	if n := cacheNotifier(drv); n != nil {
		cfg.OnCached, cfg.OnReused = n.MemCached, n.MemReused
	}
	return &devicePool{log: orDiscard(log), cache: alloc.New(poolDevice{drv}, cfg)}
}

// get returns a device block of at least n bytes: from n's size class when
// classed is true (served from the cache when it holds one), else of exactly
// n bytes. n <= 0, a closed pool, a refusal for lack of room (ErrBudget) and
// a driver failure are errors; none of them holds anything.
func (p *devicePool) get(op string, n int, classed bool) (deviceAlloc, error) {
	if n <= 0 {
		return deviceAlloc{}, newError(op, KindInvalidArgument,
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
		return deviceAlloc{}, poolError(op, n, err)
	}
	return deviceAlloc{ptr: blk.Ptr, n: n, blk: blk}, nil
}

// free gives a back and returns a driver failure, after which a is still
// allocated and the caller keeps it. The zero deviceAlloc is ignored.
func (p *devicePool) free(op string, a deviceAlloc) error {
	if a.ptr == 0 {
		return nil
	}
	if err := p.cache.Free(a.blk); err != nil {
		p.log.Error("freeing device memory failed", "op", op, "ptr", a.ptr, "bytes", a.blk.Size, "err", err)
		return poolError(op, a.n, err)
	}
	return nil
}

// put gives a back where no caller can take a failure (transfer staging,
// dispatch scratch): a failure is logged by free, and a is kept for the
// next trim or close to free.
func (p *devicePool) put(a deviceAlloc) {
	if p.free("release device staging", a) != nil {
		p.unfreed.keep(a)
	}
}

// retryUnfreed frees the blocks an earlier put failed to free and returns
// the first failure; blocks that fail again stay kept.
func (p *devicePool) retryUnfreed(op string) error {
	return p.unfreed.retry(func(a deviceAlloc) error { return p.free(op, a) })
}

// unfreedBlocks returns how many blocks, and bytes, put failed to free and
// keeps for a retry.
func (p *devicePool) unfreedBlocks() (n int, bytes uint64) {
	return p.unfreed.count(func(a deviceAlloc) uint64 { return a.blk.Size })
}

// cachedBytes returns the bytes of freed blocks the pool keeps.
func (p *devicePool) cachedBytes() uint64 { return p.cache.Stats().Cached }

// allocatedBytes returns the device bytes the pool holds: blocks in use, at
// their class size, plus cached ones.
func (p *devicePool) allocatedBytes() uint64 { return p.cache.Stats().Reserved }

// trim gives every cached block back to the driver, and retries the blocks
// put failed to free (into the cache, when it has room).
func (p *devicePool) trim(op string) error {
	rerr := p.retryUnfreed(op)
	if err := p.cache.Trim(); err != nil {
		return poolError(op, 0, err)
	}
	return rerr
}

// close trims the pool (retrying the blocks put failed to free) and
// refuses later gets; blocks freed afterwards go straight to the driver. It
// returns the first driver failure.
func (p *devicePool) close() error {
	const op = "close device pool"
	if err := p.cache.Close(); err != nil {
		_ = p.retryUnfreed(op)
		return poolError(op, 0, err)
	}
	return p.retryUnfreed(op)
}

// poolError turns an allocator error into the Backend's *Error for op.
func poolError(op string, n int, err error) *Error {
	var short *alloc.ShortError
	var dev *alloc.DeviceError
	switch {
	case errors.As(err, &short):
		e := newError(op, KindBudget, "device memory: "+short.Error(),
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
			return nullSuccess(op, call)
		}
		e := driverError(op, call, dev.Err)
		if n > 0 {
			e.Detail = fmt.Sprintf("%s failed for a %d-byte request", call, n)
		}
		return e
	case errors.Is(err, alloc.ErrNullBlock):
		return nullSuccess(op, "MemAlloc")
	case errors.Is(err, alloc.ErrClosed):
		return errs.ClosedPool(op, "device allocation pool")
	}
	// ErrBadBlock and ErrZeroSize: the Backend passed the allocator
	// something it never handed out; callers validate first, so this is a
	// bug in the Backend, reported rather than hidden.
	e := newError(op, KindInvalidArgument, "device allocator: "+err.Error(),
		"report this as a bug in vyrecuda, with the calls that led to it")
	e.Err = err
	return e
}

// Trim gives every cached device block and every cached pinned staging
// block back to the driver now. Memory in use is never touched: live
// resident buffers, and staging or scratch that unfinished or quarantined
// work still holds (that is not in the caches). Afterwards PoolCachedBytes
// is (0, 0) and the device holds exactly MemoryStats().Reserved bytes for
// this Backend. A driver failure to free a block leaves that block cached
// (or, for pinned staging without room in its cache, kept and still
// counted in ReservedPinned) and is returned after every other block was
// freed; the next Trim retries it, as it retries pinned staging whose free
// failed after a transfer. Trim on a closed Backend is ErrClosed.
func (b *Backend) Trim() error {
	const op = "Trim"
	if b == nil {
		return newError(op, KindInvalidArgument, "the Backend is nil", "call Trim on a Backend from core.Open")
	}
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	derr := b.devPool.trim(op)
	herr := b.hostPool.Trim(op)
	if derr != nil {
		return derr
	}
	if herr != nil {
		return herr
	}
	return nil
}

// newHostPool returns the pinned host pool of a Backend opened with cfg;
// its evictions run on the copy helpers.
func newHostPool(drv Driver, cfg *config) *hostmem.Pool {
	return hostmem.New(drv, hostmem.Config{Cap: cfg.pinnedPoolCap, Log: cfg.log, Helpers: evictHelpers{},
		SpareWindow: cfg.pinTest.SpareWindow, SpareRetry: cfg.pinTest.SpareRetry, EvictHook: cfg.pinTest.EvictHook})
}

// evictHelpers runs the pinned pool's evictions as background jobs of
// copyHelpers (pipeline.go): helpers take their tasks only when no call's
// copying has one for them, so a next readback's own copy out comes first.
type evictHelpers struct{}

// NewJob returns a background job of n tasks that finish ends.
func (evictHelpers) NewJob(n int, task func(int), finish func(), linger time.Duration) hostmem.Job {
	j := &evictionJob{}
	j.job = taskJob{f: task, n: int64(n), linger: linger, done: make(chan struct{}), finish: func() {
		finish()
		j.settled.Store(true)
	}}
	j.job.left.Store(int64(n))
	return j
}

// evictionJob is one eviction on the copy helpers.
type evictionJob struct {
	job     taskJob
	settled atomic.Bool // finish has returned
}

// Start lists j as a background job and wakes up to workers helpers.
func (j *evictionJob) Start(workers int) {
	copyHelpers.addBackground(&j.job, min(workers, maxCopyWorkers))
}

// Wait helps with j's remaining tasks and returns once its finish has
// returned: it polls for up to waitSpin, then blocks.
func (j *evictionJob) Wait() {
	j.job.work()
	var sp spinner
	var until time.Time
	for !j.settled.Load() {
		if now, ok := sp.pause(); ok {
			if until.IsZero() {
				until = now.Add(waitSpin)
			} else if now.After(until) {
				<-j.job.done
				return
			}
		}
	}
}
