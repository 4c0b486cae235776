package churn

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStepsAreDeterministicAndWellFormed(t *testing.T) {
	a := Steps(DefaultSteps, 1, DefaultMaxSize, DefaultMaxLive)
	require.Equal(t, a, Steps(DefaultSteps, 1, DefaultMaxSize, DefaultMaxLive))
	require.NotEqual(t, a, Steps(DefaultSteps, 2, DefaultMaxSize, DefaultMaxLive))
	require.Len(t, a, DefaultSteps)
	live, allocs, small, large := 0, 0, 0, 0
	for _, s := range a {
		if s.Size > 0 {
			require.LessOrEqual(t, s.Size, DefaultMaxSize)
			live++
			allocs++
			if s.Size < 4096 {
				small++
			}
			if s.Size > 1<<20 {
				large++
			}
			continue
		}
		require.GreaterOrEqual(t, s.Slot, 0)
		require.Less(t, s.Slot, live)
		live--
	}
	require.InDelta(t, DefaultSteps/2, allocs, DefaultSteps/10, "about half the steps allocate")
	// Log-uniform sizes: over half are below 4 KiB, some above 1 MiB.
	require.Greater(t, small, allocs/2)
	require.Greater(t, large, allocs/50)
}

func TestRunFreesEverything(t *testing.T) {
	steps := Steps(2000, 7, 1<<10, 8)
	held := map[int]bool{}
	next := 0
	_, err := Run(steps, nil, func(n int) (int, error) {
		next++
		held[next] = true
		return next, nil
	}, func(h int) error {
		if !held[h] {
			return errors.New("freed twice or never allocated")
		}
		delete(held, h)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, held)

	// A failure stops the run and still frees what is live.
	calls := 0
	_, err = Run(steps, nil, func(n int) (int, error) {
		calls++
		if calls == 5 {
			return 0, errors.New("refused")
		}
		next++
		held[next] = true
		return next, nil
	}, func(h int) error { delete(held, h); return nil })
	require.ErrorContains(t, err, "refused")
	require.Empty(t, held)
}
