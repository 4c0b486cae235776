// Package churn is the allocation churn workload shared by the benchmarks:
// a fixed pseudo-random sequence of allocations of random sizes and frees of
// random live buffers, the shape a training loop's temporaries give an
// allocator. The sequence matches the PyTorch peer benchmark's: sizes are
// log-uniform from 1 byte to MaxSize, each step frees a random live buffer
// with probability 1/2 (always when MaxLive are live, never when none is),
// and everything still live is freed at the end.
package churn

import (
	"errors"
	"math"
	"math/rand/v2"
)

// The workload's defaults.
const (
	DefaultSteps   = 20000
	DefaultMaxSize = 4 << 20
	DefaultMaxLive = 500
)

// Step is one operation: an allocation of Size bytes when Size > 0, else a
// free of the live buffer at index Slot (the last live buffer then takes its
// place).
type Step struct {
	Size int
	Slot int
}

// Steps returns the sequence of n steps for seed, with sizes up to maxSize
// bytes and at most maxLive buffers live at once. The same arguments always
// give the same sequence.
func Steps(n int, seed uint64, maxSize, maxLive int) []Step {
	r := rand.New(rand.NewPCG(seed, 0x636875726e))
	steps := make([]Step, 0, n)
	live := 0
	logMax := math.Log(float64(max(maxSize, 1)))
	for range n {
		if live > 0 && (r.Float64() < 0.5 || live >= maxLive) {
			steps = append(steps, Step{Slot: r.IntN(live)})
			live--
			continue
		}
		size := int(math.Exp(r.Float64() * logMax))
		steps = append(steps, Step{Size: min(max(size, 1), maxSize)})
		live++
	}
	return steps
}

// Run performs steps with alloc and free, then frees every buffer still
// live. It stops at the first failure and still frees what is live.
func Run[H any](steps []Step, live []H, alloc func(n int) (H, error), free func(H) error) (rest []H, err error) {
	live = live[:0]
	for _, s := range steps {
		if s.Size > 0 {
			h, err := alloc(s.Size)
			if err != nil {
				return live, errors.Join(err, freeAll(live, free))
			}
			live = append(live, h)
			continue
		}
		last := len(live) - 1
		h := live[s.Slot]
		live[s.Slot] = live[last]
		live = live[:last]
		if err := free(h); err != nil {
			return live, errors.Join(err, freeAll(live, free))
		}
	}
	return live[:0], freeAll(live, free)
}

func freeAll[H any](live []H, free func(H) error) error {
	var errs []error
	for _, h := range live {
		if err := free(h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
