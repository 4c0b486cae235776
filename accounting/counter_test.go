package accounting

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCounterZeroValue(t *testing.T) {
	var c Counter
	assert.Equal(t, uint64(0), c.Load())
	require.NoError(t, c.Add(5))
	assert.Equal(t, uint64(5), c.Load())
}

func TestCounterAddSub(t *testing.T) {
	tests := []struct {
		name    string
		start   uint64
		op      func(c *Counter) error
		wantErr error
		want    uint64
	}{
		{"add", 1, func(c *Counter) error { return c.Add(2) }, nil, 3},
		{"add to max", math.MaxUint64 - 2, func(c *Counter) error { return c.Add(2) }, nil, math.MaxUint64},
		{"add overflow", math.MaxUint64 - 2, func(c *Counter) error { return c.Add(3) }, ErrOverflow, math.MaxUint64 - 2},
		{"sub", 10, func(c *Counter) error { return c.Sub(4) }, nil, 6},
		{"sub to zero", 10, func(c *Counter) error { return c.Sub(10) }, nil, 0},
		{"sub underflow", 10, func(c *Counter) error { return c.Sub(11) }, ErrUnderflow, 10},
		{"guarded accept", 10, func(c *Counter) error {
			return c.AddGuarded(5, func(next uint64) error {
				if next != 15 {
					return errors.New("guard saw the wrong next value")
				}
				return nil
			})
		}, nil, 15},
		{"guarded nil guard", 10, func(c *Counter) error { return c.AddGuarded(5, nil) }, nil, 15},
		{"guarded overflow skips guard", math.MaxUint64, func(c *Counter) error {
			return c.AddGuarded(1, func(uint64) error { panic("guard must not run on overflow") })
		}, ErrOverflow, math.MaxUint64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Counter
			c.Store(tt.start)
			err := tt.op(&c)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, c.Load())
		})
	}
}

func TestCounterGuardRejects(t *testing.T) {
	var c Counter
	c.Store(7)
	errBudget := errors.New("over budget")
	err := c.AddGuarded(4, func(next uint64) error {
		if next > 10 {
			return errBudget
		}
		return nil
	})
	require.ErrorIs(t, err, errBudget, "the guard's own error is returned")
	assert.Equal(t, uint64(7), c.Load())
}

func TestCounterSubOrRepair(t *testing.T) {
	var c Counter
	c.Store(10)
	assert.False(t, c.SubOrRepair(4))
	assert.Equal(t, uint64(6), c.Load())
	assert.False(t, c.SubOrRepair(6))
	assert.Equal(t, uint64(0), c.Load())
	c.Store(3)
	assert.True(t, c.SubOrRepair(4))
	assert.Equal(t, uint64(0), c.Load())
}

func TestCounterNext(t *testing.T) {
	var c Counter
	for want := uint64(1); want <= 3; want++ {
		id, err := c.Next()
		require.NoError(t, err)
		assert.Equal(t, want, id)
	}
	c.Store(math.MaxUint64 - 1)
	id, err := c.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(math.MaxUint64), id)
	_, err = c.Next()
	require.ErrorIs(t, err, ErrOverflow)
	assert.Equal(t, uint64(math.MaxUint64), c.Load(), "a failed Next leaves the counter unchanged")
}

func TestCounterNextConcurrentUnique(t *testing.T) {
	var c Counter
	const workers, each = 8, 200
	ids := make(chan uint64, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := c.Next()
				if err == nil {
					ids <- id
				}
			}
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[uint64]bool{}
	for id := range ids {
		assert.False(t, seen[id], "id %d handed out twice", id)
		seen[id] = true
	}
	assert.Len(t, seen, workers*each)
	assert.Equal(t, uint64(workers*each), c.Load())
}
