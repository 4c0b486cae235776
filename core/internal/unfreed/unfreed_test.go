package unfreed

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryKeepsOnlyWhatFailsAgainAndReturnsTheFirstFailure(t *testing.T) {
	l := New(func(b []byte) uint64 { return uint64(len(b)) })
	n, bytes := l.Count()
	assert.Zero(t, n)
	assert.Zero(t, bytes)
	a, b, c := make([]byte, 10), make([]byte, 20), make([]byte, 30)
	l.Keep(a)
	l.Keep(b)
	l.Keep(c)
	n, bytes = l.Count()
	assert.Equal(t, 3, n)
	assert.Equal(t, uint64(60), bytes)

	errB, errC := errors.New("b failed"), errors.New("c failed")
	var tried []int
	err := l.Retry(func(v []byte) error {
		tried = append(tried, len(v))
		switch len(v) {
		case 20:
			return errB
		case 30:
			return errC
		}
		return nil
	})
	require.ErrorIs(t, err, errB, "the first failure is returned")
	assert.Equal(t, []int{10, 20, 30}, tried, "every kept item is tried once, in order")
	n, bytes = l.Count()
	assert.Equal(t, 2, n, "what failed again stays kept")
	assert.Equal(t, uint64(50), bytes)

	require.NoError(t, l.Retry(func([]byte) error { return nil }))
	n, bytes = l.Count()
	assert.Zero(t, n, "a retry that frees everything leaves the list empty")
	assert.Zero(t, bytes)
}

func TestRetryMayKeepFromInsideFree(t *testing.T) {
	// free runs without the list's lock, so a free that keeps another item
	// (a pool giving back a block while it retries) does not deadlock.
	l := New(func(int) uint64 { return 1 })
	l.Keep(1)
	require.NoError(t, l.Retry(func(int) error { l.Keep(2); return nil }))
	n, _ := l.Count()
	assert.Equal(t, 1, n)
}
