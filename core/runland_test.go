package core_test

// Run's one large read into Go memory lands in chunks after the batch's
// work, each copied out as it lands, with no fence of its own: which
// batches do that, that the bytes and the caller's storage are right, and
// that a failure on the way holds nothing and leaves the Backend working.

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// landCalls is what a batch did to read back: DMAs to the host, events
// recorded and streams synchronized.
type landCalls struct{ d2h, records, syncs uint64 }

func (s *kernelReadStep) landCalls() landCalls {
	return landCalls{s.dev.Calls(sim.OpMemcpyDtoHAsync), s.dev.Calls(sim.OpEventRecord), s.dev.Calls(sim.OpStreamSynchronize)}
}

func (c landCalls) minus(d landCalls) landCalls {
	return landCalls{c.d2h - d.d2h, c.records - d.records, c.syncs - d.syncs}
}

// goBatch is W8's step from a Go slice: in uploaded into x, y = 3x, y read.
func (s *kernelReadStep) goBatch() core.Batch {
	b := s.batch(true, s.y.All())
	b.Uploads[0].Data = append([]byte(nil), s.in...)
	return b
}

// TestRunLandsLargeReadsInChunks: a Run whose one read of 2 MiB lands in
// Go memory moves it in several DMAs, an event after each and no stream
// synchronization, into the storage of dst's first slot, and counts a
// device copy and a sync point per chunk.
func TestRunLandsLargeReadsInChunks(t *testing.T) {
	const n = 2 << 20
	s := newKernelReadStep(t, n, sim.Config{})
	batch := s.goBatch()
	slot := make([]byte, 0, n)
	before, tel0, h2d0 := s.landCalls(), s.b.Telemetry(), s.dev.Calls(sim.OpMemcpyHtoDAsync)
	out, err := s.b.Run(batch, [][]byte{slot})
	require.NoError(t, err)
	got, tel := s.landCalls().minus(before), s.b.Telemetry()
	require.Len(t, out, 1)
	require.Equal(t, scaled(s.in), out[0])
	assert.Same(t, &slot[:1][0], &out[0][0], "the read landed in the slot's storage")
	assert.Greater(t, got.d2h, uint64(1), "the read moved in chunks")
	assert.Equal(t, landCalls{got.d2h, got.d2h, 0}, got, "an event after each chunk, no fence")
	assert.Equal(t, got.d2h, tel.SyncPoints-tel0.SyncPoints, "a sync point per landing")
	assert.Equal(t, uint64(n), tel.DeviceToHostBytes-tel0.DeviceToHostBytes)
	h2d := s.dev.Calls(sim.OpMemcpyHtoDAsync) - h2d0
	assert.Equal(t, h2d+got.d2h, tel.DeviceCopies-tel0.DeviceCopies, "every DMA of the upload and every chunk")
	require.NoError(t, s.b.Free(s.y), "nothing holds the batch's buffers after it")
}

// notLanding is a batch (W8's step of n bytes edited by edit, on a
// Backend opened with opts) whose read cannot land after the work.
type notLanding struct {
	name string
	opts []core.Option
	edit func(s *kernelReadStep, b *core.Batch)
}

// notLandingBatches are the batches of n bytes each way whose read cannot
// land after the work, in Run or in a graph: two reads, a read below the
// staged size, and WithAtomicReadbacks.
func notLandingBatches(n int) []notLanding {
	return []notLanding{
		{name: "two reads", edit: func(s *kernelReadStep, b *core.Batch) {
			b.Reads = []core.Range{{Buf: s.y, Offset: 0, Len: n / 2}, {Buf: s.x, Offset: n / 2, Len: n / 2}}
		}},
		{name: "a read of 48 KiB", edit: func(s *kernelReadStep, b *core.Batch) {
			b.Reads = []core.Range{{Buf: s.y, Offset: 0, Len: 48 << 10}}
		}},
		{name: "atomic readbacks", opts: []core.Option{core.WithAtomicReadbacks(true)}},
	}
}

// checkReads checks that out holds each read of batch, W8's step edited
// (y = 3x, or x itself).
func (s *kernelReadStep) checkReads(t *testing.T, batch core.Batch, out [][]byte) {
	t.Helper()
	y := scaled(s.in)
	for i, r := range batch.Reads {
		want := y[r.Offset : r.Offset+r.Len]
		if r.Buf == s.x {
			want = s.in[r.Offset : r.Offset+r.Len]
		}
		assert.True(t, bytes.Equal(want, out[i]), "read %d", i)
	}
}

// landingFaults are the failures on the way of a read landing in chunks: a
// chunk's DMA, an event record or query, the staging's allocation, and a
// chunk's DMA whose drain fails too (a quarantine).
var landingFaults = []struct {
	name  string
	op    sim.Op
	nth   int
	drain bool
}{
	{"the first chunk's DMA", sim.OpMemcpyDtoHAsync, 1, false}, {"the third chunk's DMA", sim.OpMemcpyDtoHAsync, 3, false},
	{"an event record", sim.OpEventRecord, 2, false}, {"an event query", sim.OpEventQuery, 1, false},
	{"the staging", sim.OpHostAlloc, 1, false}, {"a chunk's DMA, then the drain", sim.OpMemcpyDtoHAsync, 2, true},
}

// TestRunLandsOnlyWhatItShould: the read moves in one DMA behind one fence
// where it cannot land after the work: RunAsync (collected later), two
// reads, a read below the staged size, and WithAtomicReadbacks.
func TestRunLandsOnlyWhatItShould(t *testing.T) {
	const n = 2 << 20
	type landCase struct {
		notLanding
		run func(s *kernelReadStep, b core.Batch) ([][]byte, error)
	}
	cases := []landCase{{notLanding: notLanding{name: "RunAsync"}, run: func(s *kernelReadStep, b core.Batch) ([][]byte, error) {
		pd, err := s.b.RunAsync(b)
		if err != nil {
			return nil, err
		}
		return pd.AwaitInto(nil)
	}}}
	for _, c := range notLandingBatches(n) {
		cases = append(cases, landCase{notLanding: c})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Copy kernels off: every read not landed is then one DMA.
			s := newKernelReadStep(t, n, sim.Config{}, append(tc.opts, core.WithKernelReads(0, -1))...)
			batch := s.goBatch()
			if tc.edit != nil {
				tc.edit(s, &batch)
			}
			run := tc.run
			if run == nil {
				run = func(s *kernelReadStep, b core.Batch) ([][]byte, error) { return s.b.Run(b, nil) }
			}
			before := s.landCalls()
			out, err := run(s, batch)
			require.NoError(t, err)
			got := s.landCalls().minus(before)
			assert.Equal(t, uint64(len(batch.Reads)), got.d2h, "one DMA per read")
			assert.Equal(t, uint64(1), got.syncs, "one fence")
			s.checkReads(t, batch, out)
		})
	}
}

// TestRunLandingFailuresHoldNothing: a chunk's DMA, an event record or
// query, or the staging's allocation failing fails Run with the Backend's
// error and dst unchanged; the buffers can be freed at once (unless the
// drain after the failure failed too, when the quarantine holds them
// until Close), nothing leaks, and the same Run succeeds afterwards.
func TestRunLandingFailuresHoldNothing(t *testing.T) {
	const n = 2 << 20
	for _, fault := range landingFaults {
		t.Run(fault.name, func(t *testing.T) {
			s := newKernelReadStep(t, n, sim.Config{})
			batch := s.goBatch()
			slot := bytes.Repeat([]byte{0xa5}, n)
			dst := [][]byte{slot[:0]}
			s.dev.FailNth(fault.op, fault.nth, cudaapi.CUDA_ERROR_UNKNOWN)
			if fault.drain {
				s.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			}
			got, err := s.b.Run(batch, dst)
			require.Error(t, err)
			var e *core.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "Run", e.Op)
			assert.Equal(t, dst, got, "dst returned unchanged")
			if fault.drain {
				assert.Equal(t, 1, s.b.LaunchResourceCounts().Quarantined, "the stream and its staging are quarantined")
			}
			if fault.op == sim.OpHostAlloc {
				assert.Equal(t, bytes.Repeat([]byte{0xa5}, n), slot, "nothing was queued: the slot is unchanged")
			}
			s.dev.ClearFaults()
			out, err := s.b.Run(batch, nil)
			require.NoError(t, err)
			require.Equal(t, scaled(s.in), out[0])
			if !fault.drain {
				require.NoError(t, s.b.Free(s.x))
				require.NoError(t, s.b.Free(s.y))
			}
		})
	}
}

// TestRunLandsIntoItsDestination: with the read's destination given in
// Batch.Into (Go memory), the chunks land there and the result slot is
// that memory.
func TestRunLandsIntoItsDestination(t *testing.T) {
	const n = 2 << 20
	s := newKernelReadStep(t, n, sim.Config{})
	batch := s.goBatch()
	into := make([]byte, n)
	batch.Into = [][]byte{into}
	before := s.landCalls()
	out, err := s.b.Run(batch, make([][]byte, 1, 4))
	require.NoError(t, err)
	assert.Greater(t, s.landCalls().minus(before).d2h, uint64(1), "the read moved in chunks")
	require.Len(t, out, 1)
	assert.Same(t, &into[0], &out[0][0], "the result slot is Into")
	require.Equal(t, scaled(s.in), into)
}
