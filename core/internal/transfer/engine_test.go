package transfer

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/stats"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// manyPlans force each plan of a transfer of many copies at toy sizes.
var manyPlans = map[string]xferplan.Tuning{
	"per-copy":     {Only: xferplan.Kinds(xferplan.PerCopy)},
	"packed":       {Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, PackParts: 1},
	"packed-parts": {Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, PackParts: 3},
}

// Uploads and drained readbacks of many buffers move exactly the callers'
// bytes under every plan, with one fence each (or one per landed part) and
// the DMAs and launches the plan queues counted.
func TestEngineMovesManyBuffersUnderEveryPlan(t *testing.T) {
	for name, plan := range manyPlans {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, Tuning{Plan: plan}, rigOpts{})
			size := func(i int) int { return 100 + 37*i }
			bufs := r.bufs(t, 12, size)
			data := make([][]byte, len(bufs))
			for i := range data {
				data[i] = pattern(i, size(i))
			}
			require.NoError(t, r.e.Upload("Upload", bufs, uploads(bufs, data)))
			up := r.tel.Snapshot()
			assert.Equal(t, uint64(1), up.UploadOps)
			assert.Equal(t, uint64(12), up.RequestedCopies)
			out, err := r.gather(t, bufs)
			require.NoError(t, err)
			assert.Equal(t, data, out)
			down := r.tel.Snapshot()
			assert.Equal(t, up.HostToDeviceBytes, down.DeviceToHostBytes)
			switch name {
			case "per-copy":
				assert.Equal(t, uint64(24), down.DeviceCopies)
				assert.Equal(t, uint64(2), down.SyncPoints)
				assert.Zero(t, down.PackedLaunches)
			case "packed":
				assert.Equal(t, uint64(2), down.PackedLaunches, "a scatter and a gather")
				assert.Equal(t, uint64(2), down.SyncPoints)
			default:
				assert.Equal(t, uint64(2), down.PackedLaunches)
				assert.Greater(t, down.SyncPoints, uint64(2), "each landed part is a sync point")
			}
			for _, b := range bufs {
				assert.Zero(t, b.uses.Load())
			}
		})
	}
}

// stagedTuning stages single copies of any size in chunks of 4 KiB through
// two rotating blocks.
var stagedTuning = Tuning{Plan: xferplan.Tuning{Only: xferplan.Kinds(xferplan.Staged), StageMin: 1,
	MinChunk: 4 << 10, MaxChunk: 4 << 10, Blocks: 2, MaxWorkers: 4, WorkerBytes: 1 << 10}}

// A staged upload and a staged single readback (straight into the output
// Gather's into gives) move the bytes chunk by chunk: a device copy per
// chunk, and the readback's bytes land in that output, not in a copy.
func TestEngineStagesSingleCopiesInChunks(t *testing.T) {
	r := newRig(t, stagedTuning, rigOpts{})
	const n = 40 << 10
	bufs := r.bufs(t, 1, func(int) int { return n })
	data := pattern(3, n)
	require.NoError(t, r.e.Upload("Upload", bufs, uploads(bufs, [][]byte{data})))
	assert.Equal(t, uint64(10), r.tel.DeviceCopies.Load(), "ten 4 KiB chunks")
	dst := make([]byte, n)
	g := r.e.NewRead(1, nil)
	g.Lens()[0] = n
	require.NoError(t, r.e.Gather("Read", g, bufs, reads(bufs), 1, func(int) []byte { return dst }))
	got := g.Single(func(int) []byte { t.Fatal("a staged read lands in into's output"); return nil })
	g.Release()
	assert.Equal(t, data, got)
	assert.Equal(t, &dst[0], &got[0])
	assert.Equal(t, uint64(20), r.tel.DeviceCopies.Load())
}

// A single copy from or into memory pinned through the registry moves by
// one DMA with no staging, and leaves the region with no pending use.
func TestEngineMovesPinnedMemoryDirectly(t *testing.T) {
	r := newRig(t, Tuning{}, rigOpts{})
	const n = 8 << 10
	bufs := r.bufs(t, 1, func(int) int { return n })
	src := r.pinnedSlice(t, n)
	copy(src, pattern(5, n))
	require.NoError(t, r.e.Upload("Upload", bufs, uploads(bufs, [][]byte{src})))
	dst := r.pinnedSlice(t, n)
	g := r.e.NewRead(1, nil)
	g.Lens()[0] = n
	require.NoError(t, r.e.Gather("Read", g, bufs, reads(bufs), 1, func(int) []byte { return dst }))
	got := g.Single(func(n int) []byte { return make([]byte, n) })
	g.Release()
	assert.Equal(t, src, got)
	assert.Equal(t, &dst[0], &got[0])
	assert.Equal(t, uint64(2), r.tel.DeviceCopies.Load())
	assert.Zero(t, r.host.ReservedBytes(), "a direct copy takes no staging")
	// The cleanup's Free of both regions fails if a use is left pending.
}

// A packed transfer whose device staging does not fit the device pool's
// budget moves by the per-copy path instead, with nothing launched.
func TestEnginePacksPerCopyWithoutDeviceRoom(t *testing.T) {
	r := newRig(t, Tuning{Plan: manyPlans["packed"]}, rigOpts{devTotal: 1 << 10})
	size := func(int) int { return 256 }
	bufs := r.bufs(t, 8, size)
	data := make([][]byte, len(bufs))
	for i := range data {
		data[i] = pattern(i, 256)
	}
	require.NoError(t, r.e.Upload("Upload", bufs, uploads(bufs, data)))
	out, err := r.gather(t, bufs)
	require.NoError(t, err)
	assert.Equal(t, data, out)
	assert.Zero(t, r.tel.PackedLaunches.Load())
	assert.Equal(t, uint64(16), r.tel.DeviceCopies.Load())
}

// A failed call whose stream cannot be drained hands its lease, staging and
// buffers to the quarantine: each buffer gets an in-flight use of the
// quarantine's own until a retry drains the stream, and the error names
// the caller's op and the failed call.
func TestEngineQuarantinesWhatAnUndrainedCallUses(t *testing.T) {
	for name, plan := range manyPlans {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, Tuning{Plan: plan}, rigOpts{})
			bufs := r.bufs(t, 6, func(int) int { return 512 })
			data := make([][]byte, len(bufs))
			for i := range data {
				data[i] = pattern(i, 512)
			}
			// The call's fence and the drain after it both fail.
			r.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			r.dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			err := r.e.Upload("UploadMany", bufs, uploads(bufs, data))
			var e *errs.Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, "UploadMany", e.Op)
			assert.Equal(t, errs.KindDriver, e.Kind)
			assert.Equal(t, int64(1), r.launch.QuarantinedLeases())
			for _, b := range bufs {
				assert.Equal(t, int64(1), b.uses.Load())
			}
			r.dev.ClearFaults()
			assert.True(t, r.launch.RetryQuarantine())
			assert.Zero(t, r.launch.QuarantinedLeases())
			for _, b := range bufs {
				assert.Zero(t, b.uses.Load())
			}
			assert.Zero(t, r.tel.UploadOps.Load(), "a failed call counts nothing")
		})
	}
}

// A failed readback that drains leaves nothing held and reports the
// driver's failure under the caller's op.
func TestEngineFailedReadbackHoldsNothing(t *testing.T) {
	for name, plan := range manyPlans {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, Tuning{Plan: plan}, rigOpts{})
			bufs := r.bufs(t, 6, func(int) int { return 512 })
			r.dev.FailNth(sim.OpMemcpyDtoHAsync, 1, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
			_, err := r.gather(t, bufs)
			var e *errs.Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, "Gather", e.Op)
			assert.Equal(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, e.Code)
			assert.Zero(t, r.launch.QuarantinedLeases())
			assert.Zero(t, r.launch.Counts().Leases)
			assert.Zero(t, r.tel.ReadbackOps.Load())
		})
	}
}

// A batch's transfers, fused, planned and staged by the engine, queue on
// one stream around the caller's own work, land in its read staging, and
// count what they queued.
func TestEngineQueuesABatchsTransfers(t *testing.T) {
	for name, plan := range manyPlans {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, Tuning{Plan: plan}, rigOpts{})
			bufs := r.bufs(t, 8, func(i int) int { return 64 * (i + 1) })
			tb := &Batch{}
			var reqs []fusion.ReadbackCopy
			for i, b := range bufs {
				tb.Ups = append(tb.Ups, fusion.UploadCopy{Handle: uint64(i + 1), Dst: b.ptr, Data: pattern(i, b.n)})
				reqs = append(reqs, fusion.ReadbackCopy{Handle: uint64(i + 1), Src: b.ptr, Len: b.n})
			}
			reqs = append(reqs, fusion.ReadbackCopy{Handle: 1}) // an empty read
			tb.NonEmptyReads = len(bufs)
			require.NoError(t, tb.Fuse("Run", reqs))
			require.NoError(t, r.e.PlanBatch("Run", tb, false))
			up := hostmem.NewStaging(r.host)
			defer up.ReturnAll()
			stage, err := r.e.StageBatch("Run", tb, &up)
			require.NoError(t, err)
			lease, err := r.launch.Lease("Run", false)
			require.NoError(t, err)
			_, err = r.e.QueueBatchUploads(lease.Stream, tb, stage)
			require.NoError(t, err)
			_, err = r.e.QueueBatchReads(lease.Stream, tb)
			require.NoError(t, err)
			require.NoError(t, r.dev.StreamSynchronize(lease.Stream))
			r.launch.Return(lease, true)
			out := tb.Rd.Fill(nil)
			for i := range bufs {
				assert.Equal(t, tb.Ups[i].Data, out[i], "read %d", i)
			}
			assert.Empty(t, out[len(bufs)])
			r.e.CountBatch(tb)
			snap := r.tel.Snapshot()
			assert.Equal(t, uint64(16), snap.RequestedCopies, "the empty read is not a request")
			if name == "per-copy" {
				assert.Equal(t, uint64(16), snap.DeviceCopies)
			} else {
				assert.Equal(t, uint64(2), snap.PackedLaunches)
			}
			tb.Rd.Release()
			r.e.ReleaseBatch(tb)
			assert.Empty(t, tb.DevStaging()[0].Len()+tb.DevStaging()[1].Len())
		})
	}
}

// The packed kernels load before a packed call takes anything: a load
// failure holds nothing and is returned as it is.
func TestEngineKernelFailureHoldsNothing(t *testing.T) {
	r := newRig(t, Tuning{Plan: manyPlans["packed"]}, rigOpts{})
	boom := errs.New("Upload", errs.KindDriver, "no module", "load it")
	r.e.kernel = func(string, Kernel) (driver.Function, error) { return 0, boom }
	bufs := r.bufs(t, 4, func(int) int { return 64 })
	data := [][]byte{pattern(0, 64), pattern(1, 64), pattern(2, 64), pattern(3, 64)}
	assert.Same(t, boom, r.e.Upload("Upload", bufs, uploads(bufs, data)))
	_, err := r.gather(t, bufs)
	assert.Same(t, boom, err)
	assert.Zero(t, r.host.ReservedBytes())
	assert.Zero(t, r.dpool.ReservedBytes())
	assert.Zero(t, r.launch.Counts().Leases)
}

// An upload of no copies makes no driver call and counts nothing.
func TestEngineEmptyTransfersTouchNothing(t *testing.T) {
	r := newRig(t, Tuning{}, rigOpts{})
	bufs := r.bufs(t, 2, func(int) int { return 64 })
	before := r.dev.Calls(sim.OpStreamCreate)
	require.NoError(t, r.e.Upload("Upload", bufs, nil))
	assert.Equal(t, before, r.dev.Calls(sim.OpStreamCreate))
	assert.Equal(t, stats.Snapshot{}, r.tel.Snapshot())
}
