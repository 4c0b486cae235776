package core_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// here returns the file and line of its caller.
func here() (string, int) {
	_, file, line, _ := runtime.Caller(1)
	return file, line
}

func eventKinds(s core.MemorySnapshot) []core.MemoryEventKind {
	var out []core.MemoryEventKind
	for _, e := range s.Events {
		out = append(out, e.Kind)
	}
	return out
}

func TestMemoryHistoryRecordsEventsWithTheCallersStack(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: 64 << 20}, core.WithDevicePoolCap(1<<20))
	require.NoError(t, b.RecordMemoryHistory(100))

	file, line := here()
	h, err := b.Alloc(1000) // line+1
	require.NoError(t, err)
	g, err := core.AllocSlice[float32](b, 10) // line+3
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Trim())
	_, err = b.Alloc(63 << 20) // over the budget of 9/10 of 64 MiB
	requireErrKind(t, err, core.ErrBudget)

	s := b.MemorySnapshot()
	assert.True(t, s.Recording)
	assert.Equal(t, 100, s.MaxEvents)
	assert.Equal(t, sim.DefaultName, s.Device)
	assert.Equal(t, []core.MemoryEventKind{core.MemoryAlloc, core.MemoryAlloc, core.MemoryFree, core.MemoryTrim, core.MemoryOOM}, eventKinds(s))

	alloc := s.Events[0]
	assert.Equal(t, "Alloc", alloc.Op)
	assert.Equal(t, uint64(1000), alloc.Requested)
	assert.Equal(t, uint64(1024), alloc.Size)
	assert.Equal(t, uint64(1000), alloc.Allocated)
	assert.Equal(t, uint64(1024), alloc.Reserved)
	require.NotEmpty(t, alloc.Stack)
	assert.Equal(t, core.MemoryFrame{Function: "github.com/vyre-go/vyrecuda/core_test.TestMemoryHistoryRecordsEventsWithTheCallersStack", File: file, Line: line + 1},
		alloc.Stack[0], "the first frame is the caller's, past the library's own")
	assert.LessOrEqual(t, len(alloc.Stack), 4)
	assert.Equal(t, line+3, s.Events[1].Stack[0].Line)
	assert.Equal(t, "AllocSlice", s.Events[1].Op)
	assert.Equal(t, uint64(1040), s.Events[1].Allocated)
	assert.Equal(t, uint64(40), s.Events[2].Allocated, "the free takes its bytes off")
	assert.Equal(t, uint64(1024), s.Events[3].Size, "the trim released the cached block")
	assert.Equal(t, uint64(63<<20), s.Events[4].Requested)

	require.Len(t, s.Blocks, 1)
	blk := s.Blocks[0]
	assert.Equal(t, g.ID, blk.Buffer)
	assert.Equal(t, uint64(40), blk.Requested)
	assert.Equal(t, uint64(40), blk.Size)
	assert.Equal(t, "AllocSlice", blk.Op)
	assert.Equal(t, s.Events[1].Time, blk.Time)
	assert.Positive(t, blk.Age)
	assert.Equal(t, s.Events[1].Stack, blk.Stack)
	assert.Equal(t, b.MemoryStats(), s.Stats)
}

func TestMemorySnapshotIsPlainJSON(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	require.NoError(t, b.RecordMemoryHistory(10))
	h, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 64)}))
	s := b.MemorySnapshot()
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	for _, key := range []string{`"events":[{"kind":"alloc"`, `"requested":64`, `"function":"github.com/vyre-go/vyrecuda/core_test.TestMemorySnapshotIsPlainJSON"`, `"blocks":[{"buffer":`} {
		assert.Contains(t, string(raw), key)
	}
	var back core.MemorySnapshot
	require.NoError(t, json.Unmarshal(raw, &back))
	again, err := json.Marshal(back)
	require.NoError(t, err)
	assert.JSONEq(t, string(raw), string(again), "a snapshot survives a round trip through JSON")
	assert.Equal(t, s.Blocks[0].Age, back.Blocks[0].Age)
}

func TestMemoryHistoryCountsBuffersFromBeforeIt(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	old, err := b.Alloc(300)
	require.NoError(t, err)
	s := b.MemorySnapshot()
	assert.False(t, s.Recording)
	assert.Empty(t, s.Events)
	require.Len(t, s.Blocks, 1, "with history off, the resident buffers")
	assert.Equal(t, core.MemoryBlock{Buffer: old.ID, Addr: s.Blocks[0].Addr, Requested: 300, Size: 320}, s.Blocks[0])

	require.NoError(t, b.RecordMemoryHistory(5))
	h, err := b.Alloc(10)
	require.NoError(t, err)
	s = b.MemorySnapshot()
	require.Len(t, s.Blocks, 2)
	assert.Equal(t, old.ID, s.Blocks[0].Buffer, "the block from before recording comes first")
	assert.Empty(t, s.Blocks[0].Stack)
	assert.True(t, s.Blocks[0].Time.IsZero())
	assert.Equal(t, h.ID, s.Blocks[1].Buffer)
	assert.Equal(t, uint64(310), s.Events[0].Allocated, "it counts toward the allocated bytes")
	require.NoError(t, b.Free(old))
	s = b.MemorySnapshot()
	assert.Equal(t, uint64(10), s.Events[len(s.Events)-1].Allocated)
	require.NoError(t, b.Free(h))
}

func TestMemoryHistoryBoundAndOff(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	require.NoError(t, b.RecordMemoryHistory(4))
	for range 5 {
		h, err := b.Alloc(8)
		require.NoError(t, err)
		require.NoError(t, b.Free(h))
	}
	s := b.MemorySnapshot()
	assert.Len(t, s.Events, 4)
	assert.Equal(t, uint64(6), s.Dropped)

	requireErrKind(t, b.RecordMemoryHistory(-1), core.ErrInvalidArgument, "maxEvents is -1")
	assert.Equal(t, 4, b.MemorySnapshot().MaxEvents, "a refusal changes nothing")

	require.NoError(t, b.RecordMemoryHistory(2))
	s = b.MemorySnapshot()
	assert.Equal(t, 2, s.MaxEvents)
	assert.Len(t, s.Events, 2)
	assert.Equal(t, []core.MemoryEventKind{core.MemoryAlloc, core.MemoryFree}, eventKinds(s), "the newest are kept")

	require.NoError(t, b.RecordMemoryHistory(0))
	h, err := b.Alloc(8)
	require.NoError(t, err)
	s = b.MemorySnapshot()
	assert.False(t, s.Recording)
	assert.Empty(t, s.Events)
	require.NoError(t, b.Free(h))

	require.NoError(t, b.Close())
	requireErrKind(t, b.RecordMemoryHistory(1), core.ErrClosed)
	assert.Empty(t, b.MemorySnapshot().Blocks, "a closed Backend has no blocks")

	var nb *core.Backend
	requireErrKind(t, nb.RecordMemoryHistory(1), core.ErrInvalidArgument)
	assert.Equal(t, core.MemorySnapshot{}, nb.MemorySnapshot())
}

// Device staging of a packed upload is a block of its own, with no Buffer,
// allocated and freed inside the call, under the call's name.
func TestMemoryHistoryShowsTransferStaging(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	bufs := make([]core.Buffer, 256)
	ups := make([]core.UploadAt, len(bufs))
	for i := range bufs {
		var err error
		bufs[i], err = b.Alloc(64)
		require.NoError(t, err)
		ups[i] = core.UploadAt{Buf: bufs[i], Data: make([]byte, 64)}
	}
	require.NoError(t, b.RecordMemoryHistory(100))
	_, line := here()
	require.NoError(t, b.Upload(ups...)) // line+1
	s := b.MemorySnapshot()
	if b.Telemetry().PackedLaunches == 0 {
		t.Skip("the planner moved these uploads without packing them")
	}
	require.Equal(t, []core.MemoryEventKind{core.MemoryAlloc, core.MemoryFree}, eventKinds(s))
	assert.Equal(t, "Upload", s.Events[0].Op)
	assert.Equal(t, line+1, s.Events[0].Stack[0].Line)
	assert.True(t, strings.HasSuffix(s.Events[0].Stack[0].Function, "TestMemoryHistoryShowsTransferStaging"))
	assert.Equal(t, s.Events[0].Addr, s.Events[1].Addr)
	for _, blk := range s.Blocks {
		assert.NotZero(t, blk.Buffer, "no staging is left live")
	}
}

// Allocations and frees on several goroutines while history is switched
// on and off and snapshots are taken: no race, and once everything is
// freed under a history that saw it all, nothing is left allocated.
func TestMemoryHistoryUnderConcurrentUse(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	churn := func(rounds int) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					h, err := b.Alloc(64 * (g + 1) * (i%5 + 1))
					if !assert.NoError(t, err) {
						return
					}
					assert.NoError(t, b.Free(h))
				}
			}()
		}
		wg.Wait()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			assert.NoError(t, b.RecordMemoryHistory(50*(i%2)))
			_ = b.MemorySnapshot()
		}
	}()
	churn(200)
	<-done

	require.NoError(t, b.RecordMemoryHistory(0)) // drop what the toggling left
	require.NoError(t, b.RecordMemoryHistory(100000))
	churn(100)
	s := b.MemorySnapshot()
	assert.Len(t, s.Events, 800)
	assert.Zero(t, s.Events[len(s.Events)-1].Allocated)
	assert.Empty(t, s.Blocks)
}

// BenchmarkAllocFreeHistory is W4B (a 4 KiB Alloc and Free pair served by
// the Backend's cache) with memory history off and on: the difference is
// what recording costs a pair (docs/MEMORY.md).
func BenchmarkAllocFreeHistory(b *testing.B) {
	for _, events := range []int{0, 10000} {
		name := "off"
		if events > 0 {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			be, _ := openSim(b, sim.Config{TotalMemory: 1 << 30})
			require.NoError(b, be.RecordMemoryHistory(events))
			h, err := be.Alloc(4 << 10)
			require.NoError(b, err)
			require.NoError(b, be.Free(h))
			b.ReportAllocs()
			for b.Loop() {
				h, err := be.Alloc(4 << 10)
				if err != nil {
					b.Fatal(err)
				}
				if err := be.Free(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
