package capture_test

import (
	"bytes"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/capture"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/fusion"
)

const bufLen = 64

// rig is a simulated device with a pool, one device buffer and a batch to
// capture: a memset of the buffer to 0xaa, then three uploads into it (two
// of them overlapping, so fusion merges them into a copy of their bytes)
// moved through pinned staging the graph packs before each launch.
type rig struct {
	dev   *sim.Device
	pool  *streams.Pool
	buf   uint64
	ups   []fusion.UploadCopy
	fused []fusion.UploadCopy
	stage []byte
	held  []string // the ops Spec.Hold was called with
	freed int      // held items released
	// failing counts Spec.Failing's calls; syncsAtFailing is the count of
	// stream synchronizations when it was last called.
	failing        int
	syncsAtFailing uint64
	guard          guard
}

func newRig(t *testing.T, cfg sim.Config) *rig {
	t.Helper()
	r := &rig{dev: sim.New(cfg)}
	r.guard.dev = r.dev
	r.pool = streams.NewPool(r.dev, nil, streams.DefaultMaxIdle)
	var err error
	r.buf, err = r.dev.MemAlloc(bufLen)
	require.NoError(t, err)
	r.ups = []fusion.UploadCopy{
		{Handle: 1, Dst: r.buf, Data: make([]byte, 16)},
		{Handle: 1, Dst: r.buf + 8, Data: make([]byte, 16)},
		{Handle: 1, Dst: r.buf + 40, Data: make([]byte, 8)},
	}
	var total uint64
	r.fused, total, err = fusion.FuseUploads(r.ups)
	require.NoError(t, err)
	r.stage, err = r.dev.HostAlloc(total)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, r.pool.Close())
		require.NoError(t, r.dev.MemFree(r.buf))
		require.NoError(t, r.dev.HostFree(unsafe.Pointer(&r.stage[0])))
		sim.RequireNoLeaks(t, r.dev)
	})
	return r
}

func (r *rig) device() capture.Device {
	return capture.Device{Drv: r.dev, Graphs: r.dev, Pool: r.pool}
}

func (r *rig) spec(t *testing.T) capture.Spec {
	spans, err := capture.Layout("Capture", r.ups, r.fused, nil)
	require.NoError(t, err)
	queue := func(s driver.Stream) error {
		if err := r.dev.MemsetD8Async(r.buf, 0xaa, bufLen, s); err != nil {
			return errs.Driver("Capture", "MemsetD8Async", err)
		}
		off := 0
		for _, c := range r.fused {
			if err := r.dev.MemcpyHtoDAsync(c.Dst, r.stage[off:off+len(c.Data)], s); err != nil {
				return errs.Driver("Capture", "MemcpyHtoDAsync", err)
			}
			off += len(c.Data)
		}
		return nil
	}
	hold := func(op string) streams.Hold {
		r.held = append(r.held, op)
		return streams.Hold{Items: []streams.Item{{Kind: streams.PinnedStaging, Bytes: uint64(len(r.stage)),
			Release: func() { r.freed++ }}}}
	}
	failing := func() {
		assert.False(t, r.guard.held, "Failing runs outside the guard")
		r.failing++
		r.syncsAtFailing = r.dev.Calls(sim.OpStreamSynchronize)
	}
	return capture.Spec{Queue: queue, Pack: capture.Pack{Stage: r.stage, Ups: r.ups, Spans: spans}, Hold: hold, Failing: failing,
		Guard: r.guard.enter}
}

// guard is a Spec.Guard that counts the graph launches made while it is
// held, and refuses launches while refuse is set.
type guard struct {
	dev      *sim.Device
	held     bool
	refuse   error
	launches uint64 // launches seen while held
}

func (g *guard) enter(string) (func(), error) {
	if g.refuse != nil {
		return nil, g.refuse
	}
	before := g.dev.Calls(sim.OpGraphLaunch)
	g.held = true
	return func() {
		g.launches += g.dev.Calls(sim.OpGraphLaunch) - before
		g.held = false
	}, nil
}

// fill writes fresh bytes into the uploads and returns what the buffer
// holds after the batch runs: the memset, then the uploads in order.
func (r *rig) fill(rng *rand.Rand) []byte {
	want := bytes.Repeat([]byte{0xaa}, bufLen)
	for _, u := range r.ups {
		rng.Read(u.Data)
		copy(want[u.Dst-r.buf:], u.Data)
	}
	return want
}

func (r *rig) read(t *testing.T) []byte {
	t.Helper()
	got, err := r.dev.ReadDevice(r.buf, bufLen)
	require.NoError(t, err)
	return got
}

func record(t *testing.T, r *rig) *capture.Graph {
	t.Helper()
	g, err := capture.Record("Capture", r.device(), r.spec(t))
	require.NoError(t, err)
	return g
}

func TestCheckRefusesDriversWithoutGraphs(t *testing.T) {
	dev := sim.New(sim.Config{})
	gd, err := capture.Check("Capture", dev)
	require.NoError(t, err)
	assert.Equal(t, driver.GraphDriver(dev), gd)

	_, err = capture.Check("Capture", struct{ driver.Driver }{dev})
	require.ErrorIs(t, err, errs.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not implement core.GraphDriver")
	assert.Contains(t, err.Error(), "cuStreamBeginCapture")

	caps := sim.DefaultCapabilities()
	caps.Graphs = false
	_, err = capture.Check("Capture", sim.New(sim.Config{Capabilities: &caps}))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not offer graphs")
}

// TestReplayRunsTheBatchWithTheCurrentUploadBytes records the batch once
// (running nothing), then replays it with new upload bytes each time, both
// blocking and asynchronously, and checks the buffer against the model.
func TestReplayRunsTheBatchWithTheCurrentUploadBytes(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	assert.Equal(t, uint64(1), r.dev.Calls(sim.OpGraphUpload), "Record uploads the executable graph")
	assert.Equal(t, make([]byte, bufLen), r.read(t), "recording runs nothing")
	live := r.dev.Live()
	assert.Equal(t, 1, live.Graphs)
	assert.Equal(t, 1, live.GraphExecs)

	rng := rand.New(rand.NewSource(3))
	launched := 0
	for i := 0; i < 3; i++ {
		want := r.fill(rng)
		require.NoError(t, g.Replay("Graph.Replay", func() { launched++ }, nil))
		assert.Equal(t, want, r.read(t), "replay %d", i)
		assert.Equal(t, i+1, launched)
	}
	for _, timing := range []bool{false, true} {
		want := r.fill(rng)
		lease, err := g.Launch("Graph.ReplayAsync", timing)
		require.NoError(t, err)
		assert.True(t, g.Busy())
		require.ErrorIs(t, g.Usable("Graph.Replay"), errs.ErrInFlight)
		assert.Equal(t, timing, lease.Start != 0 && lease.End != 0, "timing events only when asked")
		require.NoError(t, r.dev.EventSynchronize(lease.Done))
		assert.Equal(t, want, r.read(t))
		r.pool.Return(lease, true)
		g.Collected()
		assert.False(t, g.Busy())
		require.NoError(t, g.Usable("Graph.Replay"))
	}
	assert.Equal(t, uint64(1), r.dev.Calls(sim.OpGraphUpload), "launches do not upload again")
	assert.Equal(t, uint64(5), r.guard.launches, "every launch under Spec.Guard")
	assert.Equal(t, uint64(5), r.dev.Calls(sim.OpGraphLaunch))
	assert.Zero(t, r.pool.Counts().Leases)
	assert.Empty(t, r.held)

	// A guard that refuses: nothing is launched, Failing is not called, no
	// lease stays out.
	r.guard.refuse = errs.New("Graph.Replay", errs.KindClosed, "refused", "fix")
	require.ErrorIs(t, g.Replay("Graph.Replay", func() { t.Error("launched") }, nil), errs.ErrClosed)
	for _, timing := range []bool{false, true} {
		lease, err := g.Launch("Graph.ReplayAsync", timing)
		require.Nil(t, lease)
		require.ErrorIs(t, err, errs.ErrClosed)
		assert.False(t, g.Busy())
	}
	assert.Equal(t, uint64(5), r.dev.Calls(sim.OpGraphLaunch), "no launch")
	assert.Zero(t, r.failing)
	assert.Zero(t, r.pool.Counts().Leases)
	r.guard.refuse = nil

	require.NoError(t, g.Destroy("Graph.Close"))
	require.NoError(t, g.Destroy("Graph.Close"), "destroying twice does nothing")
	live = r.dev.Live()
	assert.Zero(t, live.Graphs)
	assert.Zero(t, live.GraphExecs)
}

// TestRecordFaultsLeaveNothing fails each driver call Record makes and
// checks the failure is reported, no graph stays and every lease is back;
// then a Record works.
func TestRecordFaultsLeaveNothing(t *testing.T) {
	faults := []struct {
		op   sim.Op
		null bool
		call string
	}{
		{op: sim.OpStreamCreate, call: "StreamCreate"},
		{op: sim.OpStreamBeginCapture, call: "StreamBeginCapture"},
		{op: sim.OpMemsetD8Async, call: "MemsetD8Async"},
		{op: sim.OpMemcpyHtoDAsync, call: "MemcpyHtoDAsync"},
		{op: sim.OpStreamEndCapture, call: "StreamEndCapture"},
		{op: sim.OpStreamEndCapture, null: true, call: "StreamEndCapture returned success with a null result"},
		{op: sim.OpGraphInstantiate, call: "GraphInstantiate"},
		{op: sim.OpGraphInstantiate, null: true, call: "GraphInstantiate returned success with a null result"},
		{op: sim.OpGraphUpload, call: "GraphUpload"},
		{op: sim.OpStreamSynchronize, call: "StreamSynchronize"},
	}
	for _, f := range faults {
		name := f.op.String()
		if f.null {
			name += "/null"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, sim.Config{})
			if f.null {
				r.dev.NullNth(f.op, 1)
			} else {
				r.dev.FailNth(f.op, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
			}
			g, err := capture.Record("Capture", r.device(), r.spec(t))
			require.Nil(t, g)
			require.ErrorIs(t, err, errs.ErrDriver)
			assert.Contains(t, err.Error(), f.call)
			live := r.dev.Live()
			assert.Zero(t, live.Graphs, "the recorded graph was destroyed")
			assert.Zero(t, live.GraphExecs, "the executable graph was destroyed")
			assert.Zero(t, live.QueuedOps, "nothing was run or left queued")
			counts := r.pool.Counts()
			assert.Zero(t, counts.Leases)
			assert.Zero(t, counts.Quarantined)
			assert.Equal(t, make([]byte, bufLen), r.read(t), "nothing ran")

			g = record(t, r)
			want := r.fill(rand.New(rand.NewSource(1)))
			require.NoError(t, g.Replay("Graph.Replay", func() {}, nil))
			assert.Equal(t, want, r.read(t))
			require.NoError(t, g.Destroy("Graph.Close"))
		})
	}
}

func TestRecordWithoutUploader(t *testing.T) {
	r := newRig(t, sim.Config{})
	dev := r.device()
	dev.Graphs = struct{ driver.GraphDriver }{r.dev} // hides GraphUpload
	g, err := capture.Record("Capture", dev, r.spec(t))
	require.NoError(t, err)
	assert.Zero(t, r.dev.Calls(sim.OpGraphUpload))
	want := r.fill(rand.New(rand.NewSource(2)))
	require.NoError(t, g.Replay("Graph.Replay", func() {}, nil))
	assert.Equal(t, want, r.read(t))
	require.NoError(t, g.Destroy("Graph.Close"))
}

// TestReplayFailuresDrainTheStream: a failed launch or fence drains the
// stream and leaves the graph usable; launched is called only once the
// launch is queued.
func TestReplayFailuresDrainTheStream(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	for _, f := range []struct {
		op       sim.Op
		launched int
	}{{sim.OpGraphLaunch, 0}, {sim.OpStreamSynchronize, 1}} {
		r.dev.FailNth(f.op, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		launched := 0
		r.failing = 0
		err := g.Replay("Graph.Replay", func() { launched++ }, nil)
		// Failing ran once, and the drain's synchronization after it.
		assert.Equal(t, 1, r.failing, "%s", f.op)
		assert.Equal(t, r.syncsAtFailing+1, r.dev.Calls(sim.OpStreamSynchronize), "%s: drained after Failing", f.op)
		require.ErrorIs(t, err, errs.ErrDriver, "%s", f.op)
		require.ErrorIs(t, err, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		assert.Equal(t, f.launched, launched, "%s", f.op)
		require.NoError(t, g.Usable("Graph.Replay"), "%s: the stream drained", f.op)
		assert.Zero(t, r.pool.Counts().Leases)
	}
	for _, op := range []sim.Op{sim.OpGraphLaunch, sim.OpEventRecord} {
		r.dev.FailNth(op, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		r.failing = 0
		lease, err := g.Launch("Graph.ReplayAsync", true)
		assert.Equal(t, 1, r.failing, "async %s", op)
		require.Nil(t, lease)
		require.ErrorIs(t, err, errs.ErrDriver, "async %s", op)
		assert.False(t, g.Busy(), "async %s", op)
		assert.Zero(t, r.pool.Counts().Leases)
	}
	assert.Empty(t, r.held, "every stream drained: nothing was held")
	want := r.fill(rand.New(rand.NewSource(4)))
	require.NoError(t, g.Replay("Graph.Replay", func() {}, nil))
	assert.Equal(t, want, r.read(t))
	require.NoError(t, g.Destroy("Graph.Close"))
}

// TestUndrainableStreamBreaksTheGraph: when the fence and the drain after
// it fail, the lease and what Spec.Hold names go to the quarantine, the
// graph refuses launches, and a later synchronization releases them.
func TestUndrainableStreamBreaksTheGraph(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	r.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	r.dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	require.ErrorIs(t, g.Replay("Graph.Replay", func() {}, nil), errs.ErrDriver)
	assert.Equal(t, []string{"Graph.Replay"}, r.held)
	assert.Equal(t, 1, r.pool.Counts().Quarantined)
	assert.Zero(t, r.freed, "held until the stream synchronizes")
	err := g.Usable("Graph.Replay")
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "could not be drained")

	require.True(t, r.pool.RetryQuarantine())
	assert.Equal(t, 1, r.freed)
	assert.Zero(t, r.pool.Counts().Leases)
	require.Error(t, g.Usable("Graph.Replay"), "a broken graph stays broken")
	require.NoError(t, g.Destroy("Graph.Close"))
}

// TestFailedAsyncWorkDrainsOrBreaks: Failed gives a drained lease back and
// leaves the graph usable; one whose stream cannot be drained is held.
func TestFailedAsyncWorkDrainsOrBreaks(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	lease, err := g.Launch("Graph.ReplayAsync", false)
	require.NoError(t, err)
	assert.Zero(t, r.failing, "a launch that works calls no Failing")
	g.Failed("Pending.Await", lease)
	assert.Equal(t, 1, r.failing)
	g.Collected()
	require.NoError(t, g.Usable("Graph.Replay"))
	assert.Empty(t, r.held)
	assert.Zero(t, r.pool.Counts().Leases)

	lease, err = g.Launch("Graph.ReplayAsync", false)
	require.NoError(t, err)
	r.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	g.Failed("Pending.Await", lease)
	g.Collected()
	assert.Equal(t, []string{"Pending.Await"}, r.held)
	require.ErrorIs(t, g.Usable("Graph.Replay"), errs.ErrDriver)
	require.True(t, r.pool.RetryQuarantine())
	assert.Equal(t, 1, r.freed)
	require.NoError(t, g.Destroy("Graph.Close"))
}

// TestDestroyFailureKeepsWhatIsLeft: a failed destroy returns the failure
// and keeps the graphs; the next Destroy retries what is left.
func TestDestroyFailureKeepsWhatIsLeft(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	r.dev.FailNth(sim.OpGraphExecDestroy, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err := g.Destroy("Graph.Close")
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "GraphExecDestroy")
	require.NoError(t, g.Usable("Graph.Replay"), "nothing was destroyed")
	require.NoError(t, g.Replay("Graph.Replay", func() {}, nil))

	r.dev.FailNth(sim.OpGraphDestroy, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err = g.Destroy("Graph.Close")
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "GraphDestroy")
	live := r.dev.Live()
	assert.Zero(t, live.GraphExecs)
	assert.Equal(t, 1, live.Graphs)
	err = g.Usable("Graph.Replay")
	require.ErrorIs(t, err, errs.ErrDriver, "its executable graph is gone")
	assert.Contains(t, err.Error(), "call Close again")
	require.NoError(t, g.Destroy("Graph.Close"))
	assert.Zero(t, r.dev.Live().Graphs)
}

// TestMissingGraphEntryPointIsUnsupported: a graph call the driver lacks
// is reported as unsupported, naming the call.
func TestMissingGraphEntryPointIsUnsupported(t *testing.T) {
	r := newRig(t, sim.Config{})
	r.dev.FailNth(sim.OpStreamBeginCapture, 1, cudaapi.CUDA_ERROR_NOT_SUPPORTED)
	_, err := capture.Record("Capture", r.device(), r.spec(t))
	require.ErrorIs(t, err, errs.ErrUnsupported)
	assert.Contains(t, err.Error(), "StreamBeginCapture is not available")
	assert.Zero(t, r.pool.Counts().Leases)
}
