package core_test

// A captured graph's one large read into Go memory is left out of the
// graph: each Replay lands it in chunks after the launch, each copied out
// as it lands, with no fence of its own; ReplayAsync moves it whole after
// the launch. Which graphs do that, that the bytes and the caller's
// storage are right at every replay, and that a failure on the way holds
// nothing and leaves the Graph working.

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestGraphReplayLandsLargeReadsInChunks: every Replay of a graph whose one
// read of 2 MiB lands in Go memory moves it in several DMAs after the
// launch, an event after each and no stream synchronization, into the
// storage of dst's first slot, with the bytes of that replay's input.
func TestGraphReplayLandsLargeReadsInChunks(t *testing.T) {
	const n = 2 << 20
	s := newKernelReadStep(t, n, sim.Config{})
	batch := s.goBatch()
	g, err := s.b.Capture(batch)
	require.NoError(t, err)
	r := rand.New(rand.NewSource(3))
	slot := make([]byte, 0, n)
	for i := range 3 {
		fillFloats(r, batch.Uploads[0].Data)
		before, tel0 := s.landCalls(), s.b.Telemetry()
		out, err := g.Replay([][]byte{slot})
		require.NoError(t, err)
		got, tel := s.landCalls().minus(before), s.b.Telemetry()
		require.Len(t, out, 1)
		require.Equal(t, scaled(batch.Uploads[0].Data), out[0], "replay %d", i)
		assert.Same(t, &slot[:1][0], &out[0][0], "the read landed in the slot's storage")
		assert.Greater(t, got.d2h, uint64(1), "the read moved in chunks")
		assert.Equal(t, landCalls{got.d2h, got.d2h, 0}, got, "an event after each chunk, no fence")
		assert.Equal(t, got.d2h, tel.SyncPoints-tel0.SyncPoints, "a sync point per landing")
		assert.Equal(t, uint64(n), tel.DeviceToHostBytes-tel0.DeviceToHostBytes)
	}
	// Into: the chunks land there, and the result slot is that memory.
	into := make([]byte, n)
	batch.Into = [][]byte{into}
	gi, err := s.b.Capture(batch)
	require.NoError(t, err)
	out, err := gi.Replay(make([][]byte, 1, 4))
	require.NoError(t, err)
	assert.Same(t, &into[0], &out[0][0], "the result slot is Into")
	require.Equal(t, scaled(batch.Uploads[0].Data), into)
	require.NoError(t, gi.Close())
	require.NoError(t, g.Close())
	require.NoError(t, s.b.Free(s.y), "nothing holds the batch's buffers after Close")
}

// TestGraphReplayAsyncMovesTheReadWhole: ReplayAsync of the same graph
// moves the read in one DMA after the launch and copies it out at
// AwaitInto; Replay and ReplayAsync alternate with the right bytes.
func TestGraphReplayAsyncMovesTheReadWhole(t *testing.T) {
	const n = 2 << 20
	s := newKernelReadStep(t, n, sim.Config{})
	batch := s.goBatch()
	g, err := s.b.Capture(batch)
	require.NoError(t, err)
	r := rand.New(rand.NewSource(4))
	for i := range 4 {
		fillFloats(r, batch.Uploads[0].Data)
		want := scaled(batch.Uploads[0].Data)
		if i%2 == 1 {
			out, err := g.Replay(nil)
			require.NoError(t, err)
			require.Equal(t, want, out[0], "replay %d", i)
			continue
		}
		before := s.landCalls()
		pd, err := g.ReplayAsync()
		require.NoError(t, err)
		fillFloats(r, batch.Uploads[0].Data) // ReplayAsync took the bytes already
		out, err := pd.AwaitInto(nil)
		require.NoError(t, err)
		require.Equal(t, want, out[0], "replay %d", i)
		assert.Equal(t, uint64(1), s.landCalls().minus(before).d2h, "one DMA of the whole read")
	}
	require.NoError(t, g.Close())
}

// TestGraphReplayLandsOnlyWhatItShould: a graph of two reads, of a read
// below the staged size, or under WithAtomicReadbacks reads inside the
// graph, behind its one fence.
func TestGraphReplayLandsOnlyWhatItShould(t *testing.T) {
	const n = 2 << 20
	for _, tc := range notLandingBatches(n) {
		t.Run(tc.name, func(t *testing.T) {
			s := newKernelReadStep(t, n, sim.Config{}, tc.opts...)
			batch := s.goBatch()
			if tc.edit != nil {
				tc.edit(s, &batch)
			}
			g, err := s.b.Capture(batch)
			require.NoError(t, err)
			before := s.landCalls()
			out, err := g.Replay(nil)
			require.NoError(t, err)
			got := s.landCalls().minus(before)
			assert.Equal(t, landCalls{0, 0, 1}, got, "no DMA after the launch, one fence")
			s.checkReads(t, batch, out)
			require.NoError(t, g.Close())
		})
	}
}

// TestGraphLandingFailuresHoldNothing: a chunk's DMA, an event record or
// query, or the landing's staging failing fails Replay with the Backend's
// error and dst unchanged; the Graph replays right afterwards (unless the
// drain after the failure failed too, which breaks it and quarantines its
// work until Close), and after Close the buffers can be freed.
func TestGraphLandingFailuresHoldNothing(t *testing.T) {
	const n = 2 << 20
	for _, fault := range landingFaults {
		t.Run(fault.name, func(t *testing.T) {
			s := newKernelReadStep(t, n, sim.Config{})
			batch := s.goBatch()
			g, err := s.b.Capture(batch)
			require.NoError(t, err)
			slot := bytes.Repeat([]byte{0xa5}, n)
			dst := [][]byte{slot[:0]}
			s.dev.FailNth(fault.op, fault.nth, cudaapi.CUDA_ERROR_UNKNOWN)
			if fault.drain {
				s.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			}
			got, err := g.Replay(dst)
			require.Error(t, err)
			var e *core.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "Graph.Replay", e.Op)
			assert.Equal(t, dst, got, "dst returned unchanged")
			s.dev.ClearFaults()
			if fault.drain {
				assert.Equal(t, 1, s.b.LaunchResourceCounts().Quarantined, "the stream and its staging are quarantined")
				_, err = g.Replay(nil)
				require.Error(t, err, "a graph whose stream could not be drained refuses replays")
			} else {
				out, err := g.Replay(nil)
				require.NoError(t, err)
				require.Equal(t, scaled(s.in), out[0])
			}
			require.NoError(t, g.Close())
			if !fault.drain {
				require.NoError(t, s.b.Free(s.x))
				require.NoError(t, s.b.Free(s.y))
			}
		})
	}
}
