package core

import (
	"fmt"
	"sync"
)

// pin validates bufs against the resident table and marks each of them in
// flight, all or nothing, returning their device addresses in order. Until
// release is called, Free refuses those buffers with ErrInFlight and
// Close refuses with ErrInFlight, so the addresses stay valid while queued
// device work uses them.
//
// For dispatch code: take the guard before queueing work that reads or
// writes the buffers and call release once that work has completed (after
// the fence or event synchronization), on every path, including failures
// after pin succeeded. release is idempotent and safe from any goroutine;
// it takes no Backend lock, so it may be called while holding one. pin takes
// only mu (shared) and makes no driver call; call it from inside a
// public method (which holds life), never after Close. Duplicates in bufs
// are allowed and counted once per occurrence. Errors: ErrUnknownHandle for
// an unknown, foreign, freed or drifted handle, naming the handle and, for
// batches, its position.
func (s *residentStore) pin(op string, bufs []Buffer) (ptrs []uint64, release func(), err error) {
	ents, err := s.pinEntries(op, bufs, nil)
	if err != nil {
		return nil, nil, err
	}
	ptrs = make([]uint64, len(ents))
	for i, e := range ents {
		ptrs[i] = e.ptr
	}
	return ptrs, s.releaser(op, ents), nil
}

// pinEntries is pin without building the address list and release closure.
// label names item i in messages (nil: "item i: " for batches of several).
func (s *residentStore) pinEntries(op string, bufs []Buffer, label func(i int) string) ([]*residentEntry, error) {
	ents := make([]*residentEntry, len(bufs))
	if err := s.pinInto(op, ents, func(i int) Buffer { return bufs[i] }, label); err != nil {
		return nil, err
	}
	return ents, nil
}

// pinInto is pinEntries for the len(ents) buffers buf(i) names, written
// into ents, so batch calls need not build a slice of their buffers. On
// failure nothing is pinned and ents holds no meaning.
func (s *residentStore) pinInto(op string, ents []*residentEntry, buf func(i int) Buffer, label func(i int) string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := range ents {
		e, err := s.lookup(op, buf(i))
		if err != nil {
			if label == nil {
				label = func(i int) string { return itemPrefix(len(ents), i) }
			}
			err.Detail = label(i) + err.Detail
			return err
		}
		ents[i] = e
	}
	// Counts change only after every handle validated, so a bad batch marks
	// nothing. Holding mu shared keeps Free (exclusive) from
	// removing an entry between its check and these increments.
	runPinHook(s)
	for _, e := range ents {
		e.inflight.Add(1)
	}
	return nil
}

// unpinEntries drops one use of each entry. An entry already at zero means
// the accounting is broken; it is logged and left at zero.
func (s *residentStore) unpinEntries(op string, ents []*residentEntry) {
	for _, e := range ents {
		if e.inflight.Add(-1) < 0 {
			e.inflight.Add(1)
			s.log.Error("resident in-flight count would have gone below zero; left at zero", "op", op, "bytes", e.n)
		}
	}
}

// pinHook, when set (tests only), runs in pinEntries between validating the
// handles and marking them in flight: the window in which a Free
// must not be able to remove a validated entry. Tests set it to run
// Free in exactly that window; it is given the store doing the pinning.
var pinHook func(s *residentStore)

// runPinHook runs pinHook, if set; every place that marks resident buffers
// in flight calls it between validating and marking.
func runPinHook(s *residentStore) {
	if h := pinHook; h != nil {
		h(s)
	}
}

// releaser returns a release func that drops one use of each entry, once.
func (s *residentStore) releaser(op string, ents []*residentEntry) func() {
	var once sync.Once
	return func() { once.Do(func() { s.unpinEntries(op, ents) }) }
}

// mentions phrases a buffer's in-flight count for messages. A batch or
// dispatch holds each buffer it names once (enqueue dedupes), so for queued
// work the count is the number of unfinished calls; a synchronous transfer
// naming one buffer twice holds it twice while it runs.
func mentions(n int64) string {
	if n == 1 {
		return "1 unfinished call"
	}
	return fmt.Sprintf("%d unfinished calls", n)
}

// graphHold counts (delta 1) or stops counting (delta -1) one use of each
// of ents as held by an open Graph, beside the in-flight marks the Graph
// holds them with; Free's message tells those uses apart.
func graphHold(ents []*residentEntry, delta int64) {
	for _, e := range ents {
		e.graphs.Add(delta)
	}
}

// inFlightFree reports a Free of handle h refused while n unfinished uses
// hold it, graphs of them by open Graphs: the fix names Graph.Close when a
// Graph holds it, and the Pending otherwise.
func inFlightFree(op string, h Buffer, n, graphs int64) *Error {
	switch {
	case graphs <= 0:
		return newError(op, KindInFlight,
			fmt.Sprintf("handle %d is used by unfinished work (%s)", h.ID, mentions(n)),
			"wait for the pending work using it (Await or Close its Pending, or SynchronizeUploads) before freeing it; a Pending dropped without either is released only after a garbage collection finds it")
	case graphs >= n:
		return newError(op, KindInFlight,
			fmt.Sprintf("handle %d is held by %d open Graph(s) that captured it", h.ID, graphs),
			"close each Graph that captured it with Graph.Close before freeing it")
	}
	return newError(op, KindInFlight,
		fmt.Sprintf("handle %d is held by %d open Graph(s) that captured it and used by other unfinished work (%s)", h.ID, graphs, mentions(n-graphs)),
		"close each Graph that captured it with Graph.Close, and Await or Close the Pending of its other work, before freeing it")
}
