package cuda

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostMarks is a page of marks over ordinary memory: the tests play the
// device by storing into the words.
func hostMarks(n int) *marks {
	page := make([]uint32, n)
	return newMarks(unsafe.Pointer(&page[0]), 0x1000, n)
}

func TestMarksHandOutEveryWordOnceWithFreshValues(t *testing.T) {
	m := hostMarks(4)
	held := map[int32]uint32{}
	for range 4 {
		w, v, ok := m.take()
		require.True(t, ok)
		_, dup := held[w]
		require.False(t, dup, "word %d handed out twice", w)
		assert.NotZero(t, v, "a fresh page holds 0, so 0 would read as already written")
		assert.False(t, m.seen(w, v), "the value must not be in the word before the device writes it")
		assert.Equal(t, uint64(0x1000+4*int(w)), m.addr(w))
		held[w] = v
	}
	_, _, ok := m.take()
	assert.False(t, ok, "with every word held, take must refuse")
	for w, v := range held {
		atomic.StoreUint32(&m.words[w], v) // the device's write lands
		assert.True(t, m.seen(w, v))
		m.put(w)
	}
	// After everything is returned, every word can be taken again, each with
	// a value it does not hold now.
	for range 4 {
		w, v, ok := m.take()
		require.True(t, ok, "after every word came back, take must succeed")
		assert.False(t, m.seen(w, v), "word %d's next value must differ from the one it holds", w)
	}
}

func TestMarksValueSkipsZeroOnWrap(t *testing.T) {
	m := hostMarks(1)
	m.last[0] = ^uint32(0)
	w, v, ok := m.take()
	require.True(t, ok)
	assert.Equal(t, int32(0), w)
	assert.NotZero(t, v, "after wrapping, the value must not be the page's initial 0")
}

func TestMarksConcurrentTakersNeverShareAWord(t *testing.T) {
	m := hostMarks(8)
	var inUse [8]atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				w, _, ok := m.take()
				if !ok {
					continue
				}
				if inUse[w].Add(1) != 1 {
					t.Errorf("word %d held by two waits", w)
				}
				inUse[w].Add(-1)
				m.put(w)
			}
		}()
	}
	wg.Wait()
	assert.Len(t, m.free, 8, "every word is free again")
}

func TestAwaitMark(t *testing.T) {
	errBoom := errors.New("stream failed")
	tests := []struct {
		name      string
		seenAfter int   // seen turns true on this call; 0: never
		queryErr  error // what every query returns
		queryDone bool
		want      markWait
	}{
		{"lands at once", 1, nil, false, markSeen},
		{"lands after polls", 5000, nil, false, markSeen},
		{"stream fails", 0, errBoom, false, markFailed},
		{"stream done without the mark", 0, nil, true, markMissing},
		{"never lands", 0, nil, false, markLate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls, queries := 0, 0
			seen := func() bool { calls++; return tc.seenAfter > 0 && calls >= tc.seenAfter }
			query := func() (bool, error) { queries++; return tc.queryDone, tc.queryErr }
			// Only the late case may run out its limit; the others get one
			// no loaded CI machine reaches, so the result never depends on
			// how fast the polls run.
			limit := time.Minute
			if tc.want == markLate {
				limit = 2 * time.Millisecond
			}
			got, err := awaitMark(seen, query, limit)
			assert.Equal(t, tc.want, got)
			if tc.want == markFailed {
				assert.ErrorIs(t, err, errBoom)
			} else {
				assert.NoError(t, err)
			}
			if tc.want == markLate {
				assert.Positive(t, queries, "a long wait must ask the driver for errors")
			}
		})
	}
}

func TestAwaitMarkSeesTheMarkWhenTheStreamReportsDone(t *testing.T) {
	// The write lands between the last poll and the query that reports the
	// stream done: the wait must still count it as seen.
	landed := false
	seen := func() bool { return landed }
	query := func() (bool, error) { landed = true; return true, nil }
	got, err := awaitMark(seen, query, time.Second)
	require.NoError(t, err)
	assert.Equal(t, markSeen, got)
}
