package core

import (
	"fmt"
	"io"

	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
)

// Memory Close fails to free.
//
// A driver free that fails at Close (MemFree of a resident buffer or of a
// cached device block, HostFree of pinned staging, HostFree or
// HostUnregister of caller-pinned memory) leaves that memory allocated.
// Close keeps every such block, still counted in MemoryStats, and reports
// them all in one ErrDriver; a later Close retries exactly those frees.
// The Backend's own driver (io.Closer) is closed only once nothing is left,
// so the retry can still reach it.

// closeLeft is what Close could not free, for its report.
type closeLeft struct {
	bufs, devBlocks, pinBlocks, regions    int
	bufBytes, devBytes, pinBytes, regBytes uint64
}

func (l closeLeft) empty() bool { return l.bufs+l.devBlocks+l.pinBlocks+l.regions == 0 }

// closer is what Close gives back to the driver and retries when a free
// fails: the resident table, the two pools, the caller-pinned registry and
// the driver itself when the Backend owns it. Open sets it up; its methods
// run with the Backend's life held exclusively, which also guards
// drvClosed.
type closer struct {
	drv       Driver
	store     *residentStore
	devPool   *devmem.Pool
	hostPool  *hostmem.Pool
	pinned    *hostmem.Registry
	drvClosed bool // the driver's io.Closer was called
}

// left counts what a Close left allocated after failed frees.
func (c *closer) left() closeLeft {
	var l closeLeft
	c.store.mu.Lock()
	l.bufs = len(c.store.unfreed)
	for _, e := range c.store.unfreed {
		l.bufBytes += uint64(e.n)
	}
	c.store.mu.Unlock()
	st := c.devPool.Stats()
	n, bytes := c.devPool.UnfreedBlocks()
	l.devBlocks, l.devBytes = int(st.CachedBlocks)+n, st.Cached+bytes
	l.pinBlocks, l.pinBytes = c.hostPool.UnfreedBlocks()
	l.regions, l.regBytes = c.pinned.Left()
	return l
}

// retryUnfreed frees the resident buffers an earlier free failed on and
// returns the first failure; those that fail again stay kept.
func (s *residentStore) retryUnfreed(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	kept := s.unfreed[:0]
	for _, e := range s.unfreed {
		if err := s.freeDevice(op, e); err != nil {
			kept = append(kept, e)
			if first == nil {
				first = err
			}
			continue
		}
		subOrRepair(&s.bytes, uint64(e.n), s.log, "resident bytes")
	}
	clear(s.unfreed[len(kept):])
	s.unfreed = kept
	return first
}

// finish ends a Close after the releases: with nothing left it closes the
// Backend's own driver (once) and returns first; otherwise it leaves the
// driver open and returns an ErrDriver naming what is left, built on the
// first failure.
func (c *closer) finish(op string, first error) error {
	if l := c.left(); !l.empty() {
		return leftError(op, l, first)
	}
	if d, ok := c.drv.(io.Closer); ok && !c.drvClosed {
		// Hook for drivers the Backend owns (OpenCUDA's): closed last, after everything above released through it.
		c.drvClosed = true
		if err := d.Close(); err != nil && first == nil {
			first = closeError(op, err)
		}
	}
	return first
}

// retry is Close of a closed Backend: it retries the frees an earlier
// Close failed on, or returns ErrClosed when there are none.
func (c *closer) retry(op string) error {
	if c.done() {
		return closedError(op)
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = closeError(op, err)
		}
	}
	keep(c.store.retryUnfreed(op))
	keep(c.devPool.Close())
	keep(c.pinned.ReleaseAll(op, c.drv))
	keep(c.hostPool.Close())
	return c.finish(op, first)
}

// closeRetryable reports whether b was closed with frees left for a later
// Close to retry.
func (b *Backend) closeRetryable() bool {
	b.life.RLock()
	defer b.life.RUnlock()
	return b.closed && !b.closing.done()
}

// done reports whether a closed Backend has nothing left to retry: every
// free succeeded and its own driver, if any, was closed.
func (c *closer) done() bool {
	return c.left().empty() && (c.drvClosed || !isCloser(c.drv))
}

func isCloser(d Driver) bool {
	_, ok := d.(io.Closer)
	return ok
}

// leftError reports what Close could not free, on top of the first failure.
func leftError(op string, l closeLeft, first error) *Error {
	e, ok := first.(*Error)
	if !ok {
		e = &Error{Op: op, Kind: KindDriver, Err: first}
	} else {
		c := *e
		e = &c
	}
	detail := fmt.Sprintf("could not free %d resident buffer(s) (%d bytes), %d device pool block(s) (%d bytes), "+
		"%d pinned staging block(s) (%d bytes) and %d pinned host range(s) (%d bytes); they stay allocated and counted in MemoryStats",
		l.bufs, l.bufBytes, l.devBlocks, l.devBytes, l.pinBlocks, l.pinBytes, l.regions, l.regBytes)
	if e.Detail != "" {
		detail = e.Detail + "; " + detail
	}
	e.Op, e.Kind, e.Detail = op, KindDriver, detail
	e.Fix = "call Close again to retry those frees (the Backend's own driver is closed once they succeed); " +
		"if they keep failing the device context is broken: end the process"
	return e
}
