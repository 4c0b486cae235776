package alloc

import (
	"errors"
	"fmt"
	"sync"
)

// Device is the raw memory a Cache draws blocks from.
type Device interface {
	// Alloc returns a new block of exactly n > 0 bytes.
	Alloc(n uint64) (ptr uint64, err error)
	// Free gives back a block Alloc returned.
	Free(ptr uint64) error
}

// FreeMemoryReader is implemented by a Device that can report its live free
// memory. A Cache over such a Device reads it once per attempt to obtain a
// new block (once per miss, up to four times when a miss must release cached
// blocks and retry; see the package documentation) and never on a cache hit.
type FreeMemoryReader interface {
	FreeMemory() (uint64, error)
}

// Config bounds a Cache.
type Config struct {
	// Budget is the most bytes the Cache reserves at once (live, cached and
	// being released). Zero means no budget.
	Budget uint64
	// MaxCached is the most bytes of freed blocks the Cache keeps. Zero
	// caches nothing.
	MaxCached uint64
	// MaxClassed is the largest request served in a size class (rounded and
	// cached); larger requests get exact, uncached blocks. Zero means
	// MaxClassSize.
	MaxClassed uint64
	// IsOutOfMemory reports whether an error of Device.Alloc means the
	// device is out of memory, which the Cache answers by releasing cached
	// blocks and trying again. Nil treats no error so.
	IsOutOfMemory func(error) bool
	// OnCached, when set, is told each block that goes into the cache,
	// before another Alloc can take it; OnReused each block an Alloc takes
	// out of it. They run with the Cache's lock held: they must be quick
	// and must not call the Cache.
	OnCached, OnReused func(ptr, size uint64)
	// OnRetry, when set, is told each Alloc that released cached blocks to
	// try again: the bytes it asked for and the bytes released. It runs
	// without the lock, before that Alloc returns.
	OnRetry func(requested, released uint64)
}

// Block is one block handed out by a Cache. It is a small comparable value;
// the caller gives it back to Free unchanged.
type Block struct {
	Ptr  uint64 // device address
	Size uint64 // bytes reserved: the request's class size, or its exact size
	// class is the size-class index, or -1 for an exact block.
	class int32
}

// Cached reports whether b belongs to a size class, so that freeing it may
// keep it for reuse.
func (b Block) Cached() bool { return b.class >= 0 }

// Stats is a snapshot of a Cache's accounting.
type Stats struct {
	Live, PeakLive         uint64 // bytes of blocks handed out and not freed
	Cached                 uint64 // bytes of freed blocks kept for reuse
	Reserved, PeakReserved uint64 // Live + Cached + bytes being released
	LiveBlocks             uint64 // blocks handed out and not freed
	CachedBlocks           uint64 // blocks in the free lists
	DeviceAllocs           uint64 // Device.Alloc calls that succeeded
	DeviceFrees            uint64 // Device.Free calls that succeeded
	Hits, Misses           uint64 // Alloc calls served from the cache, and not
	FreeMemoryReads        uint64 // FreeMemoryReader.FreeMemory calls
	Retries                uint64 // Alloc calls that released cached blocks and tried again
	OOMs                   uint64 // Alloc calls refused for lack of memory or budget
	Released               uint64 // bytes of cached blocks given back by retries and Trim
}

// Cache is a caching allocator over a Device. See the package documentation.
type Cache struct {
	dev     Device
	freeMem FreeMemoryReader // nil when dev cannot report free memory
	cfg     Config

	mu        sync.Mutex // guards everything below
	lists     [numClasses][]uint64
	st        Stats
	releasing uint64 // bytes taken out of the cache and not yet freed
	closed    bool
}

// Errors a Cache returns besides *ShortError and the Device's own.
var (
	// ErrClosed is returned by Alloc after Close.
	ErrClosed = errors.New("alloc: the cache is closed")
	// ErrZeroSize is returned by Alloc for a request of 0 bytes.
	ErrZeroSize = errors.New("alloc: a request of 0 bytes")
	// ErrNullBlock is returned by Alloc when the Device returned address 0
	// without an error.
	ErrNullBlock = errors.New("alloc: the device returned a null block without an error")
	// ErrBadBlock is returned by Free for a block this Cache cannot have
	// handed out (a null address, a size that is not its class's, or more
	// bytes than are live).
	ErrBadBlock = errors.New("alloc: the block was not handed out by this cache")
)

// New returns an empty Cache over dev.
func New(dev Device, cfg Config) *Cache {
	if cfg.MaxClassed == 0 || cfg.MaxClassed > MaxClassSize {
		cfg.MaxClassed = MaxClassSize
	}
	c := &Cache{dev: dev, cfg: cfg}
	c.freeMem, _ = dev.(FreeMemoryReader)
	return c
}

// Config returns the Cache's configuration, with defaults filled in.
func (c *Cache) Config() Config { return c.cfg }

// Alloc returns a block of at least n bytes: a cached block of n's class when
// there is one (no Device call), else a new one (see the package
// documentation for the retries). On failure nothing is held.
func (c *Cache) Alloc(n uint64) (Block, error) {
	return c.alloc(n, n <= c.cfg.MaxClassed)
}

// AllocExact returns a block of exactly n bytes that is never cached: it
// goes back to the Device when it is freed. It is checked against the
// budget and retried like Alloc.
func (c *Cache) AllocExact(n uint64) (Block, error) { return c.alloc(n, false) }

func (c *Cache) alloc(n uint64, classed bool) (Block, error) {
	if n == 0 {
		return Block{}, ErrZeroSize
	}
	idx, size := -1, n
	if classed {
		idx, size = classOf(n)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Block{}, ErrClosed
	}
	if classed {
		if l := c.lists[idx]; len(l) > 0 {
			ptr := l[len(l)-1]
			c.lists[idx] = l[:len(l)-1]
			c.st.Cached -= size
			c.st.CachedBlocks--
			c.st.Live += size
			c.st.LiveBlocks++
			c.st.Hits++
			c.st.PeakLive = max(c.st.PeakLive, c.st.Live)
			if c.cfg.OnReused != nil {
				c.cfg.OnReused(ptr, size)
			}
			c.mu.Unlock()
			return Block{Ptr: ptr, Size: size, class: int32(idx)}, nil
		}
	}
	c.st.Misses++
	c.mu.Unlock()
	return c.allocMiss(n, idx, size)
}

// allocMiss obtains a new block from the Device, releasing cached blocks
// and trying again when it does not fit.
func (c *Cache) allocMiss(n uint64, idx int, size uint64) (Block, error) {
	b, f := c.attempt(idx, size)
	if f == nil {
		return b, nil
	}
	if !f.short {
		return Block{}, f.err
	}
	report := &ShortError{Requested: n, Size: size, Budget: c.cfg.Budget}
	c.mu.Lock()
	report.Cached = c.st.Cached
	c.mu.Unlock()
	if report.Cached > 0 {
		c.mu.Lock()
		c.st.Retries++
		c.mu.Unlock()
		if c.cfg.OnRetry != nil {
			defer func() { c.cfg.OnRetry(n, report.Released) }()
		}
		for _, need := range []uint64{f.missing, releaseAll} {
			rel, err := c.release(need)
			report.Released += rel
			if err != nil {
				report.ReleaseErr = errors.Join(report.ReleaseErr, err)
			}
			if b, f = c.attempt(idx, size); f == nil {
				return b, nil
			} else if !f.short {
				return Block{}, f.err
			}
		}
	}
	if idx >= 0 && f.limit != LimitDevice && f.missing <= size-n {
		// The class does not fit by less than its rounding: the exact
		// size does, unless the device refuses it.
		if b, f = c.attempt(-1, n); f == nil {
			return b, nil
		} else if !f.short {
			return Block{}, f.err
		}
	}
	c.mu.Lock()
	c.st.OOMs++
	report.Reserved = c.st.Live + c.st.Cached + c.releasing
	c.mu.Unlock()
	report.Missing, report.FreeMemory, report.Limit, report.Cause = f.missing, f.free, f.limit, f.err
	return Block{}, report
}

// releaseAll asks release for every cached block.
const releaseAll = ^uint64(0)

// failure is why an attempt failed: short (with the bytes missing, the limit
// that refused and the free memory read, if any), or an error of the Device.
type failure struct {
	short   bool
	missing uint64
	limit   string
	free    uint64
	err     error
}

// attempt reserves size bytes against the budget, checks the live free
// memory and calls Device.Alloc once. idx is the class, or -1 for an exact
// block. On failure nothing stays reserved.
func (c *Cache) attempt(idx int, size uint64) (Block, *failure) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Block{}, &failure{err: ErrClosed}
	}
	reserved := c.st.Live + c.st.Cached + c.releasing
	if c.cfg.Budget > 0 && (size > c.cfg.Budget || reserved > c.cfg.Budget-size) {
		c.mu.Unlock()
		return Block{}, &failure{short: true, missing: reserved + size - c.cfg.Budget, limit: LimitBudget}
	}
	c.st.Live += size // reserved while the Device is asked
	if c.freeMem != nil {
		c.st.FreeMemoryReads++
	}
	c.mu.Unlock()
	undo := func() {
		c.mu.Lock()
		c.st.Live -= size
		c.mu.Unlock()
	}
	var free uint64
	if c.freeMem != nil {
		var err error
		if free, err = c.freeMem.FreeMemory(); err != nil {
			undo()
			return Block{}, &failure{err: &DeviceError{Call: "FreeMemory", Err: err}}
		}
		if usable := nineTenths(free); size > usable {
			undo()
			return Block{}, &failure{short: true, missing: size - usable, limit: LimitFreeMemory, free: free}
		}
	}
	ptr, err := c.dev.Alloc(size)
	if err != nil {
		undo()
		if c.cfg.IsOutOfMemory != nil && c.cfg.IsOutOfMemory(err) {
			return Block{}, &failure{short: true, missing: size, limit: LimitDevice, free: free, err: err}
		}
		return Block{}, &failure{err: &DeviceError{Call: "Alloc", Err: err}}
	}
	if ptr == 0 {
		undo()
		return Block{}, &failure{err: ErrNullBlock}
	}
	c.mu.Lock()
	c.st.LiveBlocks++
	c.st.DeviceAllocs++
	c.st.PeakLive = max(c.st.PeakLive, c.st.Live)
	c.st.PeakReserved = max(c.st.PeakReserved, c.st.Live+c.st.Cached+c.releasing)
	c.mu.Unlock()
	return Block{Ptr: ptr, Size: size, class: int32(idx)}, nil
}

// nineTenths is floor(9x/10) without overflow.
func nineTenths(x uint64) uint64 { return 9*(x/10) + 9*(x%10)/10 }

// Free gives b back: into its class's free list when the cache has room
// under MaxCached (no Device call), else to the Device. When the Device
// fails to free it, b stays live and the error (a *DeviceError) is
// returned, so the caller can keep the block and retry. A block this Cache
// cannot have handed out is refused with ErrBadBlock, changing nothing.
func (c *Cache) Free(b Block) error {
	if b.Ptr == 0 || b.Size == 0 || b.class >= numClasses ||
		(b.class >= 0 && classSize(int(b.class)) != b.Size) || (b.class < 0 && b.class != -1) {
		return ErrBadBlock
	}
	c.mu.Lock()
	if b.Size > c.st.Live || c.st.LiveBlocks == 0 {
		c.mu.Unlock()
		return ErrBadBlock
	}
	if b.class >= 0 && !c.closed && c.st.Cached+b.Size <= c.cfg.MaxCached {
		if c.cfg.OnCached != nil {
			c.cfg.OnCached(b.Ptr, b.Size)
		}
		c.lists[b.class] = append(c.lists[b.class], b.Ptr)
		c.st.Live -= b.Size
		c.st.LiveBlocks--
		c.st.Cached += b.Size
		c.st.CachedBlocks++
		c.mu.Unlock()
		return nil
	}
	c.st.Live -= b.Size
	c.st.LiveBlocks--
	c.releasing += b.Size
	c.mu.Unlock()
	err := c.dev.Free(b.Ptr)
	c.mu.Lock()
	c.releasing -= b.Size
	if err != nil {
		c.st.Live += b.Size
		c.st.LiveBlocks++
	} else {
		c.st.DeviceFrees++
	}
	c.mu.Unlock()
	if err != nil {
		return &DeviceError{Call: "Free", Err: err}
	}
	return nil
}

// Trim gives every cached block back to the Device. A block the Device fails
// to free stays cached; the failures are returned joined (each a
// *DeviceError) after every block was tried. Trim never touches live blocks.
func (c *Cache) Trim() error {
	_, err := c.release(releaseAll)
	return err
}

// Close trims the cache and refuses later Allocs with ErrClosed; blocks
// freed afterwards go straight to the Device. Closing again only trims.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Trim()
}

// release gives cached blocks back to the Device: every one for need ==
// releaseAll; else the smallest single cached block of at least need bytes,
// or, when there is none, the largest blocks until need bytes are covered.
// It returns the bytes freed; blocks the Device fails to free go back into
// the cache.
func (c *Cache) release(need uint64) (uint64, error) {
	c.mu.Lock()
	blocks := c.pick(need)
	var total uint64
	for _, p := range blocks {
		total += classSize(p.class)
	}
	c.st.Cached -= total
	c.st.CachedBlocks -= uint64(len(blocks))
	c.releasing += total
	c.mu.Unlock()

	var freed uint64
	var errs []error
	var failed []picked
	for _, p := range blocks {
		if err := c.dev.Free(p.ptr); err != nil {
			errs = append(errs, &DeviceError{Call: "Free", Err: err})
			failed = append(failed, p)
			continue
		}
		freed += classSize(p.class)
	}
	c.mu.Lock()
	c.releasing -= total
	c.st.DeviceFrees += uint64(len(blocks) - len(failed))
	c.st.Released += freed
	for _, p := range failed {
		c.lists[p.class] = append(c.lists[p.class], p.ptr)
		c.st.Cached += classSize(p.class)
		c.st.CachedBlocks++
	}
	c.mu.Unlock()
	return freed, errors.Join(errs...)
}

// picked is a cached block taken out of its list for release.
type picked struct {
	class int
	ptr   uint64
}

// pick removes the blocks release frees from the lists; mu is held.
func (c *Cache) pick(need uint64) []picked {
	var out []picked
	take := func(idx int) {
		l := c.lists[idx]
		out = append(out, picked{class: idx, ptr: l[len(l)-1]})
		c.lists[idx] = l[:len(l)-1]
	}
	if need == releaseAll {
		for idx := range c.lists {
			for len(c.lists[idx]) > 0 {
				take(idx)
			}
			c.lists[idx] = nil
		}
		return out
	}
	if need <= MaxClassSize {
		first, _ := classOf(max(need, 1))
		for idx := first; idx < numClasses; idx++ {
			if len(c.lists[idx]) > 0 {
				take(idx)
				return out
			}
		}
	}
	var got uint64
	for idx := numClasses - 1; idx >= 0 && got < need; idx-- {
		for len(c.lists[idx]) > 0 && got < need {
			take(idx)
			got += classSize(idx)
		}
	}
	return out
}

// Stats returns a snapshot of the accounting.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Reserved = s.Live + s.Cached + c.releasing
	return s
}

// ResetPeaks sets the peak values to the current ones.
func (c *Cache) ResetPeaks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.PeakLive = c.st.Live
	c.st.PeakReserved = c.st.Live + c.st.Cached + c.releasing
}

// The limits a ShortError names.
const (
	LimitBudget     = "the budget"
	LimitFreeMemory = "9/10 of the free device memory"
	LimitDevice     = "the device (out of memory)"
)

// ShortError reports a request the Cache could not meet even after giving
// its cached blocks back.
type ShortError struct {
	Requested  uint64 // bytes asked for
	Size       uint64 // bytes the request reserves (its class size)
	Budget     uint64 // Config.Budget
	Reserved   uint64 // bytes reserved when the request failed
	Cached     uint64 // bytes cached when the request came
	Released   uint64 // bytes of cached blocks given back for it
	Missing    uint64 // bytes still missing on the last try
	Limit      string // what refused the last try: LimitBudget, LimitFreeMemory or LimitDevice
	FreeMemory uint64 // the device's free memory on the last read, if any
	Cause      error  // the Device's out-of-memory error, for LimitDevice
	ReleaseErr error  // failures to free cached blocks, if any
}

// Error says what was asked, what refused it and the bytes involved.
func (e *ShortError) Error() string {
	s := fmt.Sprintf("a %d-byte request (reserving %d) does not fit %s", e.Requested, e.Size, e.Limit)
	if e.Limit != LimitBudget {
		s += fmt.Sprintf(" (%d device bytes free)", e.FreeMemory)
	}
	return s + fmt.Sprintf(": %d bytes reserved of a %d-byte budget, %d cached, %d released, %d still missing",
		e.Reserved, e.Budget, e.Cached, e.Released, e.Missing)
}

// Unwrap returns the Device's error and any release failure.
func (e *ShortError) Unwrap() []error {
	var out []error
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	if e.ReleaseErr != nil {
		out = append(out, e.ReleaseErr)
	}
	return out
}

// DeviceError is a failure of a Device call, other than one Alloc answers as
// out of memory.
type DeviceError struct {
	Call string // "Alloc", "Free" or "FreeMemory"
	Err  error
}

// Error names the call and its error.
func (e *DeviceError) Error() string { return "alloc: device " + e.Call + ": " + e.Err.Error() }

// Unwrap returns the Device's error.
func (e *DeviceError) Unwrap() error { return e.Err }
