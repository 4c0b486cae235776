//go:build gpu

// GPU tests of batches over memory pinned through the Backend (Batch doc):
// one elementwise step (out = a + b) run once in each form, from Go slices
// and from pinned memory, with Run, RunAsync and Batch.Into, and captured
// and replayed with changing inputs, each checked against the sum computed
// on the host. Its 64 KiB read into pinned memory follows the step, so a
// copy kernel writes it where the device maps pinned host memory:
//
//	.gpu/core.test -test.run 'GPUBatchPinned' -test.v
//	compute-sanitizer --tool memcheck .gpu/core.test -test.run GPUBatchPinned

package core_test

import (
	"encoding/binary"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// pinnedStepWords is the length of each vector: 64 KiB each way.
const pinnedStepWords = 16 << 10

// pinnedStep is one upload-add-read step: a and b uploaded, out = a + b
// read back.
type pinnedStep struct {
	a, b, out core.Buffer
}

func newPinnedStep(t *testing.T, b *core.Backend) *pinnedStep {
	t.Helper()
	s := &pinnedStep{}
	for _, h := range []*core.Buffer{&s.a, &s.b, &s.out} {
		var err error
		*h, err = b.Alloc(4 * pinnedStepWords)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, b.Free(*h)) })
	}
	return s
}

// batch uploads a and b from da and db, adds them, and reads out (into
// into, when not nil).
func (s *pinnedStep) batch(da, db, into []byte) core.Batch {
	batch := core.Batch{
		Uploads: []core.UploadAt{{Buf: s.a, Data: da}, {Buf: s.b, Data: db}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{s.a, s.b, s.out}}},
		Reads:   []core.Range{s.out.All()},
	}
	if into != nil {
		batch.Into = [][]byte{into}
	}
	return batch
}

// requireSum checks that out holds the wrapping u32 sums of da and db.
func requireSum(t *testing.T, da, db, out []byte) {
	t.Helper()
	require.Len(t, out, 4*pinnedStepWords)
	for i := 0; i < len(out); i += 4 {
		want := binary.LittleEndian.Uint32(da[i:]) + binary.LittleEndian.Uint32(db[i:])
		if got := binary.LittleEndian.Uint32(out[i:]); got != want {
			t.Fatalf("word %d: %#x, want %#x", i/4, got, want)
		}
	}
}

// pinnedInputs allocates pinned memory holding a and b back to back, filled
// with random bytes, freed at cleanup unless the test freed it.
func pinnedInputs(t *testing.T, b *core.Backend, r *rand.Rand) (*core.PinnedBuffer, []byte, []byte) {
	t.Helper()
	const n = 4 * pinnedStepWords
	p, err := b.AllocHostPinned(2 * n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Free() })
	r.Read(p.Bytes())
	return p, p.Bytes()[:n], p.Bytes()[n:]
}

func TestGPUBatchPinnedRunFromGoSlices(t *testing.T) {
	gpu := dispatchGPU(t)
	s := newPinnedStep(t, gpu)
	r := rand.New(rand.NewSource(41))
	da, db := randomBytes(r, 4*pinnedStepWords), randomBytes(r, 4*pinnedStepWords)
	dst := [][]byte{make([]byte, 0, 4*pinnedStepWords)}
	out, err := gpu.Run(s.batch(da, db, nil), dst)
	require.NoError(t, err)
	requireSum(t, da, db, out[0])
	assert.Equal(t, unsafe.SliceData(dst[0]), unsafe.SliceData(out[0]), "a slot with the capacity is reused")
}

func TestGPUBatchPinnedRunFromPinned(t *testing.T) {
	gpu := dispatchGPU(t)
	s := newPinnedStep(t, gpu)
	_, da, db := pinnedInputs(t, gpu, rand.New(rand.NewSource(42)))
	res, err := gpu.AllocHostPinned(4 * pinnedStepWords)
	require.NoError(t, err)
	out, err := gpu.Run(s.batch(da, db, nil), [][]byte{res.Bytes()[:0]})
	require.NoError(t, err)
	requireSum(t, da, db, out[0])
	assert.Equal(t, &res.Bytes()[0], &out[0][0], "the read landed in the pinned dst slot")
	tel := gpu.Telemetry()
	assert.Equal(t, uint64(4*pinnedStepWords), tel.DeviceToHostBytes)
	assert.Equal(t, uint64(8*pinnedStepWords), tel.HostToDeviceBytes)
	if gpu.Capabilities().MappedPinnedHost {
		// 64 KiB behind the step: a copy kernel writes it (WithKernelReads).
		assert.Equal(t, uint64(1), tel.PackedLaunches, "the read was written by a copy kernel")
		assert.Equal(t, uint64(2), tel.DeviceCopies, "the uploads' DMAs only")
	}
	require.NoError(t, res.Free(), "Run collected its work: the pinned memory is free")
}

func TestGPUBatchPinnedRunAsyncInto(t *testing.T) {
	gpu := dispatchGPU(t)
	s := newPinnedStep(t, gpu)
	in, da, db := pinnedInputs(t, gpu, rand.New(rand.NewSource(43)))
	res, err := gpu.AllocHostPinned(4 * pinnedStepWords)
	require.NoError(t, err)
	pd, err := gpu.RunAsync(s.batch(da, db, res.Bytes()))
	require.NoError(t, err)
	assert.ErrorIs(t, res.Free(), core.ErrInFlight, "the read's destination is in flight")
	assert.ErrorIs(t, in.Free(), core.ErrInFlight, "the uploads' pinned Data is in flight")
	require.NoError(t, pd.Await())
	requireSum(t, da, db, res.Bytes()) // the read landed before AwaitInto
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	assert.Equal(t, &res.Bytes()[0], &out[0][0], "the result slot is Into")
	require.NoError(t, res.Free())
	require.NoError(t, in.Free())
}

func TestGPUBatchPinnedGraphReplay(t *testing.T) {
	gpu := dispatchGPU(t)
	s := newPinnedStep(t, gpu)
	r := rand.New(rand.NewSource(44))
	in, da, db := pinnedInputs(t, gpu, r)
	res, err := gpu.AllocHostPinned(4 * pinnedStepWords)
	require.NoError(t, err)
	g, err := gpu.Capture(s.batch(da, db, res.Bytes()))
	require.NoError(t, err)
	for i := range 20 {
		r.Read(in.Bytes()) // new inputs in the pinned Data the graph reads
		out, err := g.Replay(nil)
		require.NoError(t, err, "replay %d", i)
		requireSum(t, da, db, out[0])
		assert.Equal(t, &res.Bytes()[0], &out[0][0], "the result slot is Into")
	}
	r.Read(in.Bytes())
	pd, err := g.ReplayAsync()
	require.NoError(t, err)
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	requireSum(t, da, db, out[0])
	assert.ErrorIs(t, res.Free(), core.ErrInFlight, "the open Graph holds its Into")
	assert.ErrorIs(t, in.Free(), core.ErrInFlight, "the open Graph holds its pinned Data")
	require.NoError(t, g.Close())
	require.NoError(t, res.Free())
	require.NoError(t, in.Free())
}
