package sim

import (
	"math/rand"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

type faultKind int

const (
	faultNone faultKind = iota
	faultFail           // fail with code, change nothing
	faultNull           // succeed with a zero result, change nothing
)

// fault is one armed injection: it fires on the countdown-th call of its
// operation, counted from when it was armed.
type fault struct {
	kind      faultKind
	countdown uint64
	code      cudaapi.Result
	random    bool // fired by FailRate rather than FailNth
}

func (f fault) err(op Op) error {
	how := "FailNth"
	if f.random {
		how = "FailRate"
	}
	return fail(op, f.code, "injected fault (%s)", how)
}

// faultState holds armed faults; guarded by Device.mu.
type faultState struct {
	nth      [numOps][]fault
	rng      *rand.Rand // non-nil while a FailRate is armed
	rate     float64
	rateCode cudaapi.Result
	rateOps  [numOps]bool
}

// admit counts a call of op and applies its fault, if any: done is true
// when the call must end at once, returning err (an injected failure, or nil
// for a call that does nothing). mu must be held.
func (d *Device) admit(op Op) (done bool, err error) {
	switch f := d.enter(op); f.kind {
	case faultFail:
		return true, f.err(op)
	case faultNull:
		return true, nil
	}
	return false, nil
}

// enter counts a call of op and reports the fault to apply to it, if any.
// Every Driver method calls it first (through admit), with d.mu held, so a
// fault fires before any validation or state change.
func (d *Device) enter(op Op) fault {
	d.calls[op]++
	fs := &d.faults
	fired := fault{}
	if list := fs.nth[op]; len(list) > 0 {
		kept := list[:0]
		for _, f := range list {
			f.countdown--
			if f.countdown == 0 {
				if fired.kind == faultNone {
					fired = f
				}
				continue
			}
			kept = append(kept, f)
		}
		for i := len(kept); i < len(list); i++ {
			list[i] = fault{}
		}
		fs.nth[op] = kept
	}
	if fired.kind != faultNone {
		return fired
	}
	if fs.rng != nil && fs.rateOps[op] && fs.rng.Float64() < fs.rate {
		return fault{kind: faultFail, code: fs.rateCode, random: true}
	}
	return fault{}
}

// FailNth makes the nth call of op from now (n = 1: the next call) fail with
// code, changing no state. Several faults may be armed for one operation; if
// two fall on the same call the one armed first wins. Calls with n < 1, an
// unknown op or code CUDA_SUCCESS arm nothing.
func (d *Device) FailNth(op Op, n int, code cudaapi.Result) {
	if !op.valid() || n < 1 || code == cudaapi.CUDA_SUCCESS {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults.nth[op] = append(d.faults.nth[op], fault{kind: faultFail, countdown: uint64(n), code: code})
}

// NullNth makes the nth call of op from now return success with a zero
// result (a zero handle or pointer, a nil slice, false, zero sizes) and
// change no state, as a misbehaving driver might. For operations that return
// nothing but an error, the call reports success without doing anything.
// Calls with n < 1 or an unknown op arm nothing.
func (d *Device) NullNth(op Op, n int) {
	if !op.valid() || n < 1 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults.nth[op] = append(d.faults.nth[op], fault{kind: faultNull, countdown: uint64(n)})
}

// FailRate makes each call of the given operations (every operation when
// none is given) fail with CUDA_ERROR_UNKNOWN with probability rate, drawn
// from a generator seeded with seed so a run can be replayed. It replaces
// any earlier FailRate. FailNth and NullNth faults take precedence.
func (d *Device) FailRate(seed int64, rate float64, ops ...Op) {
	d.FailRateWith(seed, rate, cudaapi.CUDA_ERROR_UNKNOWN, ops...)
}

// FailRateWith is FailRate with a chosen failure code. A rate <= 0 or code
// CUDA_SUCCESS disarms random failures.
func (d *Device) FailRateWith(seed int64, rate float64, code cudaapi.Result, ops ...Op) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fs := &d.faults
	fs.rng, fs.rateOps = nil, [numOps]bool{}
	if !(rate > 0) || code == cudaapi.CUDA_SUCCESS {
		return
	}
	if rate > 1 {
		rate = 1
	}
	fs.rng, fs.rate, fs.rateCode = rand.New(rand.NewSource(seed)), rate, code
	if len(ops) == 0 {
		ops = Ops()
	}
	for _, op := range ops {
		if op.valid() {
			fs.rateOps[op] = true
		}
	}
}

// ClearFaults disarms every FailNth, NullNth and FailRate fault.
func (d *Device) ClearFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = faultState{}
}

// Calls returns how many times op has been called, including calls that
// failed or were faulted.
func (d *Device) Calls(op Op) uint64 {
	if !op.valid() {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[op]
}

// CallCounts returns the call count of every operation called at least once.
func (d *Device) CallCounts() map[Op]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[Op]uint64)
	for op, n := range d.calls {
		if n > 0 {
			m[Op(op)] = n
		}
	}
	return m
}

// ResetCalls sets every call counter to zero.
func (d *Device) ResetCalls() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = [numOps]uint64{}
}
