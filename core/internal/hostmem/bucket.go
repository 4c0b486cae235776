package hostmem

import (
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"sync"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// numBuckets covers every power-of-two bucket an int can hold: bucket 1<<i
// lives at index i, so the bucket table is an array, not a map, and a hit
// never hashes.
const numBuckets = bits.UintSize

// bucketCache is the Pool's free-list table: one LIFO list per power-of-two
// bucket (bucket 1<<i at index i), bounded slots per bucket, a byte cap
// over all buckets and an exact count of the cached bytes.
type bucketCache[T any] struct {
	name string // "pinned host pool": prefixes log messages
	log  *slog.Logger
	max  uint64 // byte cap over all cached entries

	// cached counts the bytes in the free lists. It changes only while mu is
	// held, together with the list it describes, but is read without mu.
	cached accounting.Counter

	mu      sync.Mutex // guards buckets and closed
	buckets [numBuckets]bucketList[T]
	closed  bool
}

// bucketList is the free list of one bucket size. slots is 0 until a get
// misses on the bucket; from then on it bounds len(free).
type bucketList[T any] struct {
	slots int
	free  []T
}

// cacheState is what pop found.
type cacheState int

const (
	cacheMiss cacheState = iota
	cacheHit
	cacheClosed
)

// pop takes the most recently cached entry of bucket idx (size bytes). On a
// miss it registers the bucket so later pushes of that size can be cached.
func (c *bucketCache[T]) pop(idx, size int) (T, cacheState) {
	var zero T
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return zero, cacheClosed
	}
	b := &c.buckets[idx]
	if last := len(b.free) - 1; last >= 0 {
		v := b.free[last]
		b.free[last] = zero // drop the reference held by the spare capacity
		b.free = b.free[:last]
		c.subCached(uint64(size))
		c.mu.Unlock()
		return v, cacheHit
	}
	if b.slots == 0 {
		b.slots = slotsFor(size, c.max)
	}
	c.mu.Unlock()
	return zero, cacheMiss
}

// push caches v in bucket idx (size bytes) and reports whether it did. It
// refuses when the cache is closed, the bucket was never registered by a
// miss, the bucket's slots are full or the byte cap would be exceeded; the
// caller then frees v for real.
func (c *bucketCache[T]) push(idx, size int, v T) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &c.buckets[idx]
	if c.closed || b.slots == 0 || len(b.free) >= b.slots {
		return false
	}
	if err := c.cached.AddGuarded(uint64(size), c.underCap); err != nil {
		return false
	}
	b.free = append(b.free, v)
	return true
}

// underCap is the AddGuarded guard that keeps cached bytes within the cap.
// It is a method value so the push path does not build a closure per call.
func (c *bucketCache[T]) underCap(next uint64) error {
	if next > c.max {
		return errOverCap
	}
	return nil
}

// errOverCap is returned by underCap; it never leaves the pool.
var errOverCap = errs.New("pool", errs.KindBudget, "cached bytes over the cap", "")

// subCached removes size bytes from the cached count, repairing to zero and
// logging when the count was already wrong, as the reference does.
func (c *bucketCache[T]) subCached(size uint64) {
	subOrRepair(&c.cached, size, c.log, c.name+" cached bytes")
}

// cachedEntry is one entry handed back by drain or closeCache.
type cachedEntry[T any] struct {
	v    T
	size uint64
}

// drain hands back every cached entry with its bucket size, removing them
// from the cached count; buckets stay registered, so later pushes are
// cached.
func (c *bucketCache[T]) drain() []cachedEntry[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []cachedEntry[T]
	for i := range c.buckets {
		b := &c.buckets[i]
		for j, v := range b.free {
			out = append(out, cachedEntry[T]{v: v, size: uint64(1) << i})
			c.subCached(uint64(1) << i)
			var zero T
			b.free[j] = zero
		}
		b.free = b.free[:0]
	}
	return out
}

// closeCache marks the cache closed and hands back every cached entry with
// its bucket size, removing them from the cached count. It is idempotent.
func (c *bucketCache[T]) closeCache() []cachedEntry[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var out []cachedEntry[T]
	for i := range c.buckets {
		b := &c.buckets[i]
		for _, v := range b.free {
			out = append(out, cachedEntry[T]{v: v, size: uint64(1) << i})
			c.subCached(uint64(1) << i)
		}
		b.free = nil
		b.slots = 0
	}
	return out
}

// count returns how many entries bucket (a power of two) holds.
func (c *bucketCache[T]) count(bucket int) int {
	if bucket <= 0 || bucket&(bucket-1) != 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buckets[bits.TrailingZeros(uint(bucket))].free)
}

// bitsIndex is the bucket index of a power-of-two size.
func bitsIndex(size int) int { return bits.TrailingZeros(uint(size)) }

// orDiscard returns log, or a logger that drops everything when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// bucketFor validates a request of n bytes and returns its bucket and the
// bucket's index in the table.
func bucketFor(op, what string, n int) (size, idx int, err error) {
	if n <= 0 {
		return 0, 0, errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("%s request of %d bytes", what, n),
			"request at least 1 byte; keep zero-length transfers off the pools")
	}
	size, berr := accounting.BucketSize(n)
	if berr != nil {
		e := errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("%s request of %d bytes has no power-of-two bucket", what, n),
			"split the request into pieces that fit in an int after rounding up")
		e.Err = berr
		return 0, 0, e
	}
	return size, bits.TrailingZeros(uint(size)), nil
}

// slotsFor is the per-bucket slot bound for this pool's byte cap.
func slotsFor(size int, maxCached uint64) int {
	return accounting.BucketSlots(size, int(min(maxCached, math.MaxInt)))
}

// subOrRepair subtracts n from c; when that would underflow the accounting is
// already wrong, so c is repaired to zero and the event logged as an error,
// where the reference repairs instead of failing the caller.
func subOrRepair(c *accounting.Counter, n uint64, log *slog.Logger, what string) {
	if c.SubOrRepair(n) {
		log.Error(what+" underflowed; repaired accounting to zero", "subtracted", n)
	}
}
