package memhist

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func kinds(ev []Event) []string {
	var out []string
	for _, e := range ev {
		out = append(out, e.Kind.String())
	}
	return out
}

func TestRingKeepsTheNewestEvents(t *testing.T) {
	r := New(3, nil)
	for i := range uint64(5) {
		r.Alloc("Alloc", 0x1000*(i+1), 10*(i+1), 16*(i+1))
	}
	s := r.Snapshot()
	require.Len(t, s.Events, 3)
	assert.Equal(t, uint64(2), s.Dropped)
	assert.Equal(t, 3, s.Max)
	for i, e := range s.Events {
		assert.Equal(t, 0x1000*uint64(i+3), e.Addr, "oldest first")
		assert.False(t, e.Time.Before(s.Events[max(i-1, 0)].Time))
	}
	assert.Len(t, s.Live, 5, "the live set does not depend on the ring")
	assert.Equal(t, uint64(150), s.Allocated)

	r.Resize(2)
	s = r.Snapshot()
	assert.Equal(t, []uint64{0x4000, 0x5000}, []uint64{s.Events[0].Addr, s.Events[1].Addr})
	assert.Equal(t, uint64(3), s.Dropped)
	r.Resize(10)
	r.Free("Free", 0x1000, 10, 16)
	s = r.Snapshot()
	assert.Equal(t, []string{"alloc", "alloc", "free"}, kinds(s.Events), "growing keeps what was there")
	assert.Equal(t, 10, s.Max)
	r.Resize(0)
	assert.Equal(t, 1, r.Snapshot().Max, "at least one event")
}

func TestLiveBlocksAndByteCounts(t *testing.T) {
	reserved := uint64(0)
	r := New(100, func() uint64 { return reserved })
	reserved = 64
	r.Alloc("Alloc", 0xa000, 40, 48)
	reserved = 128
	r.Alloc("Upload", 0xb000, 20, 24)
	r.Free("Free", 0xa000, 40, 48)
	r.Free("Free", 0xdead, 7, 8) // unknown: recorded, counts unchanged
	r.Released(Retry, "Alloc", 1000, 512)
	r.Released(Trim, "Trim", 0, 24)
	r.OOM("Alloc", 1<<40, 1<<40)
	s := r.Snapshot()
	assert.Equal(t, []string{"alloc", "alloc", "free", "free", "retry", "trim", "oom"}, kinds(s.Events))
	var alloc, res []uint64
	for _, e := range s.Events {
		alloc, res = append(alloc, e.Allocated), append(res, e.Reserved)
	}
	assert.Equal(t, []uint64{40, 60, 20, 20, 20, 20, 20}, alloc)
	assert.Equal(t, []uint64{64, 128, 128, 128, 128, 128, 128}, res)
	assert.Equal(t, uint64(512), s.Events[4].Size, "a retry carries the bytes it released")
	assert.Equal(t, uint64(1000), s.Events[4].Requested)
	require.Len(t, s.Live, 1)
	assert.Equal(t, Block{Addr: 0xb000, Requested: 20, Size: 24, Op: "Upload", Time: s.Events[1].Time, Stack: s.Events[1].Stack}, s.Live[0])

	// A block allocated again at a known address replaces the old one.
	r.Alloc("Alloc", 0xb000, 5, 8)
	assert.Equal(t, uint64(5), r.Snapshot().Allocated)
}

func TestSeededBlocksCountUntilFreed(t *testing.T) {
	r := New(10, nil)
	r.Alloc("Alloc", 0x2000, 8, 8)
	r.Seed(0x1000, 100, 112, "before")
	r.Seed(0x2000, 999, 999, "ignored") // known already
	s := r.Snapshot()
	assert.Len(t, s.Events, 1, "seeding records no event")
	assert.Equal(t, uint64(108), s.Allocated)
	require.Len(t, s.Live, 2)
	assert.Equal(t, Block{Addr: 0x1000, Requested: 100, Size: 112, Op: "before"}, s.Live[0], "seeded blocks come first, with no time or stack")
	r.Free("Free", 0x1000, 100, 112)
	assert.Equal(t, uint64(8), r.Snapshot().Allocated)
}

func TestEventsCarryTheCallersStack(t *testing.T) {
	r := New(10, nil)
	_, file, line, _ := runtime.Caller(0)
	r.Alloc("Alloc", 0x1000, 1, 1) // the line after Caller's
	r.Alloc("Alloc", 0x2000, 1, 1)
	s := r.Snapshot()
	fr := Frames(s.Events[0].Stack, nil, 3)
	require.NotEmpty(t, fr)
	assert.Equal(t, Frame{Function: "github.com/vyre-go/vyrecuda/core/internal/memhist.TestEventsCarryTheCallersStack", File: file, Line: line + 1}, fr[0])
	assert.Len(t, fr, 2, "the test and testing.tRunner; runtime frames dropped")
	assert.Equal(t, "testing.tRunner", fr[1].Function)
	assert.NotEqual(t, fr[0].Line, Frames(s.Events[1].Stack, nil, 1)[0].Line)

	// The same call site shares one stack.
	for range 2 {
		r.Free("Free", 0x1000, 1, 1)
	}
	s = r.Snapshot()
	assert.Same(t, &s.Events[2].Stack[0], &s.Events[3].Stack[0])

	// Leading frames of the library are dropped; when nothing else is left,
	// the stack is kept whole.
	fr = Frames(s.Events[0].Stack, []string{"github.com/vyre-go/vyrecuda/"}, 3)
	require.NotEmpty(t, fr)
	assert.Equal(t, "testing.tRunner", fr[0].Function)
	fr = Frames(s.Events[0].Stack, []string{"github.com/vyre-go/vyrecuda/", "testing."}, 3)
	assert.True(t, strings.HasSuffix(fr[0].Function, "TestEventsCarryTheCallersStack"))
	assert.Nil(t, Frames(nil, nil, 3))
	assert.Nil(t, Frames(s.Events[0].Stack, nil, 0))
}

func TestKindNames(t *testing.T) {
	assert.Equal(t, []string{"alloc", "free", "retry", "trim", "oom", "unknown", "unknown"},
		[]string{Alloc.String(), Free.String(), Retry.String(), Trim.String(), OOM.String(), Kind(0).String(), Kind(99).String()})
}

func TestConcurrentEventsKeepTheCountsExact(t *testing.T) {
	r := New(64, nil)
	var wg sync.WaitGroup
	for g := range uint64(8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range uint64(200) {
				addr := g<<32 | i<<4
				r.Alloc("Alloc", addr, i+1, i+1)
				if i%2 == 0 {
					r.Free("Free", addr, i+1, i+1)
				}
			}
		}()
	}
	wg.Wait()
	s := r.Snapshot()
	assert.Len(t, s.Events, 64)
	assert.Equal(t, uint64(8*300-64), s.Dropped)
	var want uint64
	for i := uint64(1); i < 200; i += 2 {
		want += i + 1
	}
	assert.Equal(t, 8*want, s.Allocated)
	assert.Len(t, s.Live, 8*100)
	for i := 1; i < len(s.Events); i++ {
		assert.False(t, s.Events[i].Time.Before(s.Events[i-1].Time), "events are in time order")
	}
}

// BenchmarkRecord is one recorded event: the stack capture, the clock
// read and the ring under its lock.
func BenchmarkRecord(b *testing.B) {
	r := New(10000, func() uint64 { return 0 })
	b.ReportAllocs()
	for b.Loop() {
		r.Alloc("Alloc", 0x1000, 64, 64)
	}
}
