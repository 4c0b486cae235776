// Package alloc is the caching allocator behind a Backend's device memory.
//
// A Cache draws raw blocks from a Device (Alloc/Free of device bytes) and
// keeps freed blocks for reuse, so that a later request of a similar size is
// served without a driver call. It owns the byte accounting of everything it
// holds and enforces one budget over it.
//
// # Size classes
//
// A request of n bytes is rounded up to a size class. Requests of 1 to 16
// bytes are their own class. Above that, every power-of-two range
// (2^k, 2^(k+1)] is cut into 8 equal steps of 2^(k-3) bytes, and n rounds up
// to the next step. The rounding therefore wastes less than 1/8 of the
// request at every size (at most 2^(k-3)-1 bytes over a request larger than
// 2^k), and a freed block serves every later request of its class exactly.
// A block is only ever handed out for requests of its own class.
//
// Requests larger than Config.MaxClassed are not rounded: they get a block of
// exactly their size, which is freed to the device when it is freed, never
// cached. So is a request whose class no longer fits the budget while its
// exact size does ("exact blocks"), so that every request up to the budget
// can be met once the cache is empty.
//
// # Accounting and the budget
//
// Reserved bytes are the device bytes the Cache holds: live blocks (handed
// out, at their class size), cached blocks, and blocks being given back to
// the device at this moment. Reserved never exceeds Config.Budget. Cached
// blocks belong to the Cache's owner: they count as available to it, and a
// request that does not fit gives them back to the device before it fails.
//
// # When the device is asked
//
// Alloc served from the cache and Free into the cache make no Device call.
// The Device is called only when a new block must be obtained (a miss): then,
// when the Device implements FreeMemoryReader, the live free memory is read
// once, and the new block must take at most 9/10 of it, leaving the rest to
// the driver and other users of the device; then Device.Alloc runs once.
//
// When a miss does not fit (the budget, 9/10 of the free memory, or a Device
// out-of-memory failure as Config.IsOutOfMemory classifies it), the Cache
// gives cached blocks back: first what suffices (the smallest cached block at
// least as large as the shortfall, else the largest blocks until the
// shortfall is covered), and tries again; then every cached block, and tries
// again; then, for a rounded request, a block of the exact size (each try
// reads the free memory again, so one miss reads it at most four times).
// Only then does it fail, with a *ShortError that says how many bytes were cached,
// released and still missing.
//
// # Caps
//
// Config.MaxCached bounds the cached bytes: a freed block that would push the
// cache over it goes back to the device at once.
//
// # Concurrency
//
// A Cache is safe for concurrent use. One mutex guards the free lists and the
// counters; Device calls run without it, except the frees of Trim and of a
// retry's release, which run with it released too but are counted as
// "releasing" in Reserved until they return.
package alloc
