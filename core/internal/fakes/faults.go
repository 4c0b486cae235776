// Package fakes holds the pieces the fake drivers of core's mechanism
// packages (hostmem, devmem, streams) share in their tests: a table of
// injected driver faults and call counts, a log handler that keeps error
// records, and an assertion on the project's errors. It exists only for
// those tests; code that is not a test must not import it.
package fakes

import (
	"sync"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Faults counts a fake driver's calls by operation name and decides which of
// them fail: the nth call from now with a code, the nth call from now with
// success and a null result, or every call with a code. The zero value is
// ready to use and safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	calls   map[string]uint64
	pending map[string][]fault
	always  map[string]cudaapi.Result
}

// fault makes one call fail (code) or return success with a null result.
type fault struct {
	countdown int
	code      cudaapi.Result
	null      bool
}

// Admit counts a call of op and returns the fault that falls on it: null
// when the call must succeed with a null result, err (a cudaapi.Result)
// when it must fail. When two faults fall on one call, the one set first
// wins.
func (f *Faults) Admit(op string) (null bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]uint64{}
	}
	f.calls[op]++
	var fired *fault
	kept := f.pending[op][:0]
	for _, p := range f.pending[op] {
		if p.countdown--; p.countdown == 0 {
			if fired == nil {
				fired = &p
			}
			continue
		}
		kept = append(kept, p)
	}
	if f.pending != nil {
		f.pending[op] = kept
	}
	code := f.always[op]
	if fired != nil {
		if fired.null {
			return true, nil
		}
		code = fired.code
	}
	if code != 0 {
		return false, code
	}
	return false, nil
}

// FailNth makes the nth call of op from now (1: the next) fail with code.
func (f *Faults) FailNth(op string, n int, code cudaapi.Result) {
	f.add(op, fault{countdown: n, code: code})
}

// NullNth makes the nth call of op from now (1: the next) return success
// and a null result.
func (f *Faults) NullNth(op string, n int) {
	f.add(op, fault{countdown: n, null: true})
}

// add queues p for op. A countdown below 1 would never fire, so it is
// dropped.
func (f *Faults) add(op string, p fault) {
	if p.countdown < 1 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending == nil {
		f.pending = map[string][]fault{}
	}
	f.pending[op] = append(f.pending[op], p)
}

// FailAll makes every call of op fail with code; code 0 stops it. A fault
// set by FailNth or NullNth still takes precedence on its call.
func (f *Faults) FailAll(op string, code cudaapi.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.always == nil {
		f.always = map[string]cudaapi.Result{}
	}
	f.always[op] = code
}

// Count returns how many calls of op Admit has seen, failed ones included.
func (f *Faults) Count(op string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}
