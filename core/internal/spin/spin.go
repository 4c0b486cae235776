// Package spin paces the polling loops of core and its drivers: a loop that
// waits for another goroutine or for the device polls with plain loads, and
// a Spinner decides, poll by poll, when it issues a spin-wait hint, reads
// the clock and gives up the processor. It knows nothing of what is polled.
package spin

import (
	"runtime"
	"time"
)

// Polling loops (helpers lingering for the next job, a caller waiting for
// its helpers' last tasks or for a gate) yield the processor only every
// YieldEvery, not on every poll: runtime.Gosched takes the scheduler's
// global lock, and 15 helpers yielding on every poll kept that lock so
// contended that 43% of the process's CPU time went to acquiring it (CPU
// profile of 1024 x 4 KiB uploads on the reference H100 host), delaying
// every goroutine that needed it: a helper starting on a new job, the
// caller returning from a driver call.
const (
	// YieldEvery is the time between yields of a polling loop.
	YieldEvery = 20 * time.Microsecond
	// ClockEvery is how many polls pass between clock reads.
	ClockEvery = 64
)

// UseHint makes every poll that found nothing issue a spin-wait hint.
// Up to 15 helpers poll while the caller waits for the driver, on a host
// whose virtual processors are hardware threads that share cores: a
// polling loop of bare atomic loads takes execution resources from the
// thread beside it, which may be the one the driver or the caller runs on.
// On the H100 host (BenchmarkGPUSinglePhases, variant nohint) uploads of 1,
// 4 and 16 MiB took 63, 265 and 666 us with the hint and 68, 310 and 1089
// without. Tests turn it off to compare; it must not change while loops
// poll.
var UseHint = true

// Spinner paces one polling loop; its zero value is ready.
type Spinner struct {
	polls uint32
	yield time.Time // when the loop next yields; zero: not yet set
	// Yield gives up the processor; nil: runtime.Gosched. A loop too short
	// to gain from yielding sets a function that does nothing; tests count
	// calls.
	Yield func()
}

// Pause is called once per poll that found nothing to do. It issues a
// spin-wait hint (CPUPause, when UseHint is set); every ClockEvery polls it
// reads the clock, yields the processor when YieldEvery has passed since
// the last yield (or the first read), and returns the time read and true;
// otherwise it returns false.
func (s *Spinner) Pause() (time.Time, bool) {
	if UseHint {
		CPUPause()
	}
	s.polls++
	if s.polls%ClockEvery != 0 {
		return time.Time{}, false
	}
	now := time.Now()
	switch {
	case s.yield.IsZero():
		s.yield = now.Add(YieldEvery)
	case !now.Before(s.yield):
		if s.Yield != nil {
			s.Yield()
		} else {
			runtime.Gosched()
		}
		s.yield = now.Add(YieldEvery)
	}
	return now, true
}
