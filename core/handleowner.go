package core

import (
	"fmt"
	"sync"
	"weak"
)

// Why a handle is unknown. Ids come from one process-wide counter, so a
// Backend's table cannot tell a buffer it freed from one another Backend
// holds; the open Backends' tables can. Open registers each Backend here
// (weakly: a Backend dropped without Close is not kept alive), Close takes
// it out, and an unknown handle asks the others whether they hold its id.
// Only that error path reads the list.
var openBackends struct {
	mu   sync.Mutex
	list []weak.Pointer[Backend]
}

// registerOpen enters b in the list of open Backends, dropping entries of
// Backends the garbage collector took.
func registerOpen(b *Backend) {
	openBackends.mu.Lock()
	defer openBackends.mu.Unlock()
	keep := openBackends.list[:0]
	for _, w := range openBackends.list {
		if w.Value() != nil {
			keep = append(keep, w)
		}
	}
	clear(openBackends.list[len(keep):])
	openBackends.list = append(keep, weak.Make(b))
}

// unregisterOpen takes b out of the list of open Backends.
func unregisterOpen(b *Backend) {
	openBackends.mu.Lock()
	defer openBackends.mu.Unlock()
	for i, w := range openBackends.list {
		if w.Value() == b {
			last := len(openBackends.list) - 1
			openBackends.list[i] = openBackends.list[last]
			openBackends.list[last] = weak.Pointer[Backend]{}
			openBackends.list = openBackends.list[:last]
			return
		}
	}
}

// heldElsewhere reports whether an open Backend other than the one owning
// s holds id live, and whether it could not look at every one. The caller
// holds s.mu (lookup runs under it), so the other tables are read with
// TryRLock only: waiting there could deadlock with a call on that Backend
// doing the same the other way round. openBackends.mu is only ever taken
// inside a store's lock, never around one.
func (s *residentStore) heldElsewhere(id uint64) (held, unsure bool) {
	openBackends.mu.Lock()
	defer openBackends.mu.Unlock()
	for _, w := range openBackends.list {
		o := w.Value()
		if o == nil || &o.store == s {
			continue
		}
		if !o.store.mu.TryRLock() {
			unsure = true
			continue
		}
		held = o.store.table.get(id) != nil
		o.store.mu.RUnlock()
		if held {
			return true, false
		}
	}
	return false, unsure
}

// unknownHandle reports a handle that is not live in s, saying why where it
// can: the zero Buffer, an id never handed out, a buffer of another open
// Backend, or one freed (by Free, a dispatcher, or Close of its Backend).
func (s *residentStore) unknownHandle(op string, h Buffer) *Error {
	if h.ID == 0 {
		return newError(op, KindUnknownHandle, fmt.Sprintf("the zero Buffer (handle 0, %d bytes) names no buffer", h.Len),
			"use a Buffer returned by this Backend's Alloc (or an OptimizerDispatcher's)")
	}
	if h.ID > handleIDs.Load() {
		return newError(op, KindUnknownHandle, fmt.Sprintf("handle %d (%d bytes) was never handed out by any Backend", h.ID, h.Len),
			"use a Buffer returned by this Backend's Alloc (or an OptimizerDispatcher's), unmodified")
	}
	held, unsure := s.heldElsewhere(h.ID)
	switch {
	case held:
		return newError(op, KindUnknownHandle, fmt.Sprintf("handle %d (%d bytes) belongs to another Backend, not this one", h.ID, h.Len),
			"pass it to the Backend that allocated it; to move its bytes here, use CopyPeer or Download there and Upload here")
	case unsure:
		return newError(op, KindUnknownHandle, fmt.Sprintf("handle %d (%d bytes) is not a live buffer of this Backend", h.ID, h.Len),
			"use a Buffer returned by this Backend's Alloc (or an OptimizerDispatcher's) and not yet freed")
	}
	return newError(op, KindUnknownHandle,
		fmt.Sprintf("handle %d (%d bytes) was freed (by Free, by an OptimizerDispatcher, or by Close of the Backend that allocated it)", h.ID, h.Len),
		"use a buffer that is still live: a freed handle never becomes valid again, so allocate a new one")
}
