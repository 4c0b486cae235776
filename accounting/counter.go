package accounting

import (
	"fmt"
	"sync/atomic"
)

// Counter is an atomic uint64 whose every change is checked: it never wraps
// and a failed call leaves it unchanged. The zero value is a counter at 0,
// ready to use. A Counter must not be copied after first use.
type Counter struct {
	v atomic.Uint64 // atomic.Uint64 also makes go vet flag copies
}

// Load returns the current value.
func (c *Counter) Load() uint64 { return c.v.Load() }

// Add adds n, or returns an ErrOverflow error and leaves the counter as it
// was when the sum does not fit.
func (c *Counter) Add(n uint64) error {
	for {
		cur := c.v.Load()
		next := cur + n
		if next < cur {
			return newError("Counter.Add", ErrOverflow,
				fmt.Sprintf("%d + %d wraps", cur, n), fixOverflow)
		}
		if c.v.CompareAndSwap(cur, next) {
			return nil
		}
	}
}

// AddGuarded adds n only if guard accepts the value that would be stored.
// guard may run several times when other goroutines race on the counter; it
// must not have side effects. Its error is returned as is and the counter
// is left unchanged; overflow is an ErrOverflow error and guard is not
// called. A nil guard accepts everything.
//
// AddGuarded is how a budget is reserved without a lock:
//
//	err := used.AddGuarded(n, func(next uint64) error {
//		if next > budget { return errOverBudget }
//		return nil
//	})
func (c *Counter) AddGuarded(n uint64, guard func(next uint64) error) error {
	for {
		cur := c.v.Load()
		next := cur + n
		if next < cur {
			return newError("Counter.AddGuarded", ErrOverflow,
				fmt.Sprintf("%d + %d wraps", cur, n), fixOverflow)
		}
		if guard != nil {
			if err := guard(next); err != nil {
				return err
			}
		}
		if c.v.CompareAndSwap(cur, next) {
			return nil
		}
	}
}

// Sub subtracts n, or returns an ErrUnderflow error and leaves the counter
// as it was when n exceeds the current value.
func (c *Counter) Sub(n uint64) error {
	for {
		cur := c.v.Load()
		if n > cur {
			return newError("Counter.Sub", ErrUnderflow,
				fmt.Sprintf("%d - %d is below zero", cur, n), fixUnderflow)
		}
		if c.v.CompareAndSwap(cur, cur-n) {
			return nil
		}
	}
}

// SubOrRepair subtracts n when it can. When n exceeds the current value the
// accounting is already wrong, so it sets the counter to zero and reports
// repaired=true; the caller logs that and, where it can, rebuilds the value
// from its live state.
func (c *Counter) SubOrRepair(n uint64) (repaired bool) {
	for {
		cur := c.v.Load()
		next, rep := cur-n, false
		if n > cur {
			next, rep = 0, true
		}
		if c.v.CompareAndSwap(cur, next) {
			return rep
		}
	}
}

// Store sets the value, for rebuilding accounting from a live table.
func (c *Counter) Store(v uint64) { c.v.Store(v) }

// Next increments the counter and returns the new value, so a zero-value
// Counter hands out 1, 2, 3, ... and never 0 (0 stays free to mean "no
// handle"). At the largest uint64 it returns an ErrOverflow error instead of
// wrapping to an id already handed out.
func (c *Counter) Next() (uint64, error) {
	for {
		cur := c.v.Load()
		if cur == ^uint64(0) {
			return 0, newError("Counter.Next", ErrOverflow,
				fmt.Sprintf("id space exhausted at %d", cur),
				"recreate the owner of the ids instead of reusing them")
		}
		if c.v.CompareAndSwap(cur, cur+1) {
			return cur + 1, nil
		}
	}
}
