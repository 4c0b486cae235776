package cuda

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Completion marks.
//
// cuStreamSynchronize learns that a stream's work is done from the driver's
// own completion tracking, which on the H100 host trails the work by about
// 2.3 us: a 32-bit write the stream makes into page-locked host memory
// right behind a DMA becomes visible that much earlier than an event
// recorded in the same place. So StreamSynchronize queues such a write (a
// mark) and polls the word with plain loads; it calls into the driver
// again only to look for errors while it waits, and blocks in
// cuStreamSynchronize when the mark is late or cannot be used. Measured in
// one C program on that host, queueing the write (1.4 us) included, a
// fenced pinned DMA of 64 KiB to 1 MiB ended 0.8-0.9 us sooner either way
// (4 KiB: 0.4-0.6 us uploads, 0.8-0.9 readbacks).
//
// The default write carries a memory barrier: every write of the work
// before it is visible to the host once the mark is. A stream whose work
// failed runs nothing further, so a seen mark also means the work
// succeeded; an error shows in the stream queries the wait makes, or in
// the cuStreamSynchronize it falls back to.

// markWords is the number of marks: one page of 32-bit words. A wait takes
// a word for its duration; with every word taken, waits block in the
// driver as before.
const markWords = 1024

const (
	// markQueryEvery is how often a wait on a mark asks the driver whether
	// the stream failed.
	markQueryEvery = 25 * time.Microsecond
	// markSpin is how long a wait polls its mark before it blocks in
	// cuStreamSynchronize instead.
	markSpin = 500 * time.Microsecond
)

// marks is a page of page-locked host words the device can write, handed
// out one per wait.
type marks struct {
	page  unsafe.Pointer // host address of the page (cuMemHostAlloc)
	dev   uint64         // device address of the same page
	words []uint32       // the page as words

	mu   sync.Mutex
	free []int32  // words no wait holds and no queued write targets
	last []uint32 // the value last written to each word

	off atomic.Bool // set when the driver refused a write: marks are not used again
}

// newMarks returns a page of n marks over page (host) and dev, its device
// address.
func newMarks(page unsafe.Pointer, dev uint64, n int) *marks {
	m := &marks{page: page, dev: dev, words: unsafe.Slice((*uint32)(page), n),
		free: make([]int32, n), last: make([]uint32, n)}
	for i := range m.free {
		m.free[i] = int32(n - 1 - i)
		atomic.StoreUint32(&m.words[i], 0)
	}
	return m
}

// take reserves a word and the value a write to it should carry: one the
// word has not held since it was last handed out. ok is false when every
// word is held.
func (m *marks) take() (w int32, v uint32, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.free) == 0 {
		return 0, 0, false
	}
	w = m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	m.last[w]++
	if m.last[w] == 0 {
		m.last[w] = 1 // 0 is the page's initial value
	}
	return w, m.last[w], true
}

// put returns word w. Only a word whose write has landed (or was never
// queued) comes back; one whose write may still be pending is left out.
func (m *marks) put(w int32) {
	m.mu.Lock()
	m.free = append(m.free, w)
	m.mu.Unlock()
}

// seen reports whether word w holds v.
func (m *marks) seen(w int32, v uint32) bool { return atomic.LoadUint32(&m.words[w]) == v }

// addr is the device address of word w.
func (m *marks) addr(w int32) uint64 { return m.dev + 4*uint64(w) }

// markWait is the outcome of polling one mark.
type markWait uint8

const (
	markSeen    markWait = iota // the mark landed: the work before it is done
	markFailed                  // a stream query reported an error
	markLate                    // polled for markSpin without seeing the mark
	markMissing                 // the stream reported done, yet the word never changed
)

// awaitMark polls seen until it reports true. Every markQueryEvery it asks
// query whether the stream failed (an error ends the wait) or finished
// (then the mark must be there). After limit it gives up. Its spinner never
// yields: the runtime preempts a long poll like any other loop, and a wait
// this short is over before a yield would pay for itself.
func awaitMark(seen func() bool, query func() (bool, error), limit time.Duration) (markWait, error) {
	sp := spin.Spinner{Yield: noYield}
	var start, nextQuery time.Time
	for {
		if seen() {
			return markSeen, nil
		}
		now, ok := sp.Pause()
		if !ok {
			continue
		}
		if start.IsZero() {
			start, nextQuery = now, now.Add(markQueryEvery)
			continue
		}
		if !now.Before(nextQuery) {
			done, err := query()
			if err != nil {
				return markFailed, err
			}
			if done {
				if seen() {
					return markSeen, nil
				}
				return markMissing, nil
			}
			nextQuery = now.Add(markQueryEvery)
		}
		if now.Sub(start) >= limit {
			return markLate, nil
		}
	}
}

// noYield is a spinner's yield that keeps the processor.
func noYield() {}

// openMarks allocates the page of marks; nil when the driver cannot give
// one the device can reach (the waits then block in the driver). It runs
// with the context current.
func openMarks(log *slog.Logger) *marks {
	const size = markWords * 4
	p, err := cudaapi.MemHostAlloc(size, cudaapi.CU_MEMHOSTALLOC_PORTABLE|cudaapi.CU_MEMHOSTALLOC_DEVICEMAP)
	if err != nil || p == nil {
		return nil
	}
	dev, err := cudaapi.MemHostGetDevicePointer(p, 0)
	if err != nil || dev == 0 {
		if ferr := cudaapi.MemFreeHost(p); ferr != nil {
			log.Error("freeing an unusable page of completion marks failed", "err", ferr)
		}
		return nil
	}
	return newMarks(p, uint64(dev), markWords)
}

// syncByMark waits for the work queued on s through a mark. handled is
// false when it could not (no free word, or the driver refused the write):
// the caller then synchronizes through the driver. It falls back to
// cuStreamSynchronize itself when the mark is late. Like that call, it
// holds the context shared for the whole wait, so Close waits for it; it
// pins its thread only around its driver calls, so the polling goroutine
// stays an ordinary one for the scheduler.
func (d *Driver) syncByMark(m *marks, s driver.Stream) (handled bool, err error) {
	w, v, ok := m.take()
	if !ok {
		return false, nil
	}
	if err := d.begin(); err != nil {
		m.put(w)
		return true, err
	}
	cs := cudaapi.Stream(s)
	werr := cudaapi.StreamWriteValue32(cs, cudaapi.DevicePtr(m.addr(w)), v, 0)
	runtime.UnlockOSThread()
	defer d.life.RUnlock()
	if werr != nil {
		// Nothing was queued. A driver without stream memory operations
		// refuses every write: stop trying.
		m.put(w)
		if m.off.CompareAndSwap(false, true) {
			d.log.Debug("completion marks unavailable; stream waits use cuStreamSynchronize", "err", werr)
		}
		return false, nil
	}
	got, err := awaitMark(func() bool { return m.seen(w, v) }, func() (bool, error) { return d.boundStream(cs, true) }, markSpin)
	switch got {
	case markSeen:
		m.put(w)
		return true, nil
	case markFailed:
		return true, err // the write may never land: w stays out
	}
	if _, err := d.boundStream(cs, false); err != nil {
		return true, err
	}
	if m.seen(w, v) {
		m.put(w)
	}
	return true, nil
}

// boundStream queries s (query set) or waits for it, pinned to a thread
// with the context current; the caller holds life shared.
func (d *Driver) boundStream(s cudaapi.Stream, query bool) (bool, error) {
	if err := d.bind(); err != nil {
		return false, err
	}
	defer runtime.UnlockOSThread()
	if query {
		return queryResult("cuStreamQuery", cudaapi.StreamQuery(s))
	}
	if err := cudaapi.StreamSynchronize(s); err != nil {
		return false, callError("cuStreamSynchronize", err)
	}
	return true, nil
}

// close frees the page; it runs with the context current, at Close.
func (m *marks) close() error {
	if m == nil || m.page == nil {
		return nil
	}
	p := m.page
	m.page = nil
	return cudaapi.MemFreeHost(p)
}
