package core

import (
	"sync/atomic"
	"time"
)

// A packed readback copies its pieces out of pinned staging into the
// caller's slots only once the whole block has landed (the slots stay
// untouched if the transfer fails), so the unpack cannot overlap the DMA.
// What can overlap it is bringing the slots' cache lines to the processor:
// while the DMA runs, the copy helpers (awake and otherwise idle) read one
// byte per cache line of every slot the unpack will write, so the unpack's
// stores find their lines in the caches instead of reading each from
// memory first. Reading changes nothing the caller can see.

// warmLine is the stride of the reads: one per cache line.
const warmLine = 64

// warmSink keeps the compiler from dropping the reads.
var warmSink atomic.Uint32

// touchLines reads one byte per cache line of p.
func touchLines(p []byte) byte {
	var x byte
	for k := 0; k < len(p); k += warmLine {
		x ^= p[k]
	}
	return x
}

// warmJob shares, with up to w-1 idle copy helpers, a job that calls
// warm(lo, hi) over slots [0, n) in about tasksPerWorker tasks per
// helper, which then linger as after any job. The caller goes on to wait for the device; stop then finishes
// what the helpers left and ends the sharing, after which warm runs no
// more. When the helpers are busy with another job (or w < 2) nothing is
// warmed and stop does nothing.
func warmJob(n, w int, linger time.Duration, warm func(lo, hi int)) (stop func()) {
	if warm == nil || w < 2 || n < 2 {
		return func() {}
	}
	tasks := min(n, (w-1)*tasksPerWorker)
	j := &taskJob{n: int64(tasks), linger: linger, done: make(chan struct{})}
	j.f = func(t int) { warm(n*t/tasks, n*(t+1)/tasks) }
	j.left.Store(j.n)
	if !copyHelpers.share(j, w-1) {
		return func() {}
	}
	return func() {
		j.workAll()
		j.wait()
		copyHelpers.unshare()
	}
}

// warmSlots returns the warm function for reading requests into the slots
// of dst (append-style, as gathered.fill writes them): slot i is dst's i-th
// element within its capacity, and its first length(i) bytes are touched
// when its capacity holds them (otherwise fill allocates a new slice).
func warmSlots(dst [][]byte, length func(i int) int) func(lo, hi int) {
	slots := dst[:cap(dst)]
	return func(lo, hi int) {
		var x byte
		for i := lo; i < min(hi, len(slots)); i++ {
			if s, n := slots[i], length(i); cap(s) >= n {
				x ^= touchLines(s[:n])
			}
		}
		warmSink.Add(uint32(x))
	}
}
