// Package unfreed keeps memory whose free failed, still allocated and
// counted, until a later Trim or Close frees it. The device and pinned host
// pools share it; it knows nothing of what it keeps but its size, and never
// calls a driver itself.
package unfreed

import "sync"

// List keeps items whose free failed. Its zero value is not ready: build
// one with New. It is safe for concurrent use.
type List[T any] struct {
	mu    sync.Mutex
	items []T
	size  func(T) uint64
}

// New returns an empty list that counts each item's bytes with size.
func New[T any](size func(T) uint64) *List[T] { return &List[T]{size: size} }

// Keep keeps v for a later Retry.
func (l *List[T]) Keep(v T) {
	l.mu.Lock()
	l.items = append(l.items, v)
	l.mu.Unlock()
}

// Retry calls free on every kept item, without holding the list's lock,
// and keeps those whose free fails again. It returns the first failure.
func (l *List[T]) Retry(free func(T) error) error {
	l.mu.Lock()
	left := l.items
	l.items = nil
	l.mu.Unlock()
	var first error
	for _, v := range left {
		if err := free(v); err != nil {
			l.Keep(v)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// Count returns how many items are kept and their bytes.
func (l *List[T]) Count() (n int, bytes uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.items {
		bytes += l.size(v)
	}
	return len(l.items), bytes
}
