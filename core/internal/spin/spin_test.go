package spin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpinnerReadsTheClockAndYieldsRarely: a polling loop reads the clock
// once every ClockEvery polls, never yields on its first read, and yields
// at most once per YieldEvery after that, however fast it polls.
func TestSpinnerReadsTheClockAndYieldsRarely(t *testing.T) {
	var yields int
	count := func() { yields++ }
	sp := Spinner{Yield: count}
	start := time.Now()
	reads := 0
	var last time.Time
	for i := 1; i <= 200*ClockEvery; i++ {
		now, ok := sp.Pause()
		require.Equal(t, i%ClockEvery == 0, ok, "poll %d", i)
		if ok {
			reads++
			assert.False(t, now.Before(last), "clock readings never go back")
			last = now
		}
	}
	elapsed := time.Since(start)
	assert.Equal(t, 200, reads)
	assert.LessOrEqual(t, yields, int(elapsed/YieldEvery), "at most one yield per YieldEvery")

	// A loop that polls for longer than YieldEvery does yield.
	yields = 0
	sp = Spinner{Yield: count}
	for until := time.Now().Add(3 * YieldEvery); time.Now().Before(until); {
		sp.Pause()
	}
	for range ClockEvery {
		sp.Pause()
	}
	assert.GreaterOrEqual(t, yields, 1, "a loop polling past YieldEvery yields")
}
