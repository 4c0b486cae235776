package core_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// deviceCalls counts the calls that queue or run work on a device.
func deviceCalls(d *sim.Device) []uint64 {
	var out []uint64
	for _, o := range []sim.Op{sim.OpAllReduce, sim.OpBroadcast, sim.OpLaunch, sim.OpMemcpyHtoDAsync, sim.OpMemsetD8Async,
		sim.OpMemcpyDtoHAsync, sim.OpStreamBeginCapture, sim.OpStreamCreate} {
		out = append(out, d.Calls(o))
	}
	return out
}

// collRefusal is a malformed collective step and the error it must get.
type collRefusal struct {
	name  string
	step  core.Step
	kind  error
	frags []string
}

// collRefusals returns malformed variants of tr's all-reduce step (step 1
// of its batch); other is another Backend's Comm.
func collRefusals(t *testing.T, tr *trainRank, other *core.Comm) []collRefusal {
	b := tr.b
	freed, err := b.Alloc(400)
	require.NoError(t, err)
	require.NoError(t, b.Free(freed))
	odd := putBytes(t, b, make([]byte, 6))
	short := putBytes(t, b, make([]byte, 40))
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	static, err := d.AcquireStaticUploads(1, [][]byte{make([]byte, 400)})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, d.ReleaseStaticUploads(static))
		assert.NoError(t, d.Close())
		assert.NoError(t, b.Free(odd))
		assert.NoError(t, b.Free(short))
	})
	ar := func(mod func(cs *core.CollectiveStep)) core.Step {
		cs := &core.CollectiveStep{Comm: tr.comm, Kind: core.CollAllReduce, Send: tr.g, Recv: tr.g, Type: core.DataFloat32, Op: core.ReduceSum}
		mod(cs)
		return core.Step{Collective: cs}
	}
	return []collRefusal{
		{"nil Comm", ar(func(cs *core.CollectiveStep) { cs.Comm = nil }), core.ErrInvalidArgument, []string{"step 1: the collective's Comm is nil"}},
		{"another Backend's Comm", ar(func(cs *core.CollectiveStep) { cs.Comm = other }), core.ErrInvalidArgument,
			[]string{"step 1", "rank 1 of 2", "another Backend"}},
		{"kernel and collective", func() core.Step { s := ar(func(*core.CollectiveStep) {}); s.Program = core.ProgramScaleF32(); return s }(),
			core.ErrInvalidArgument, []string{"step 1", "both a Collective and a kernel"}},
		{"bad kind", ar(func(cs *core.CollectiveStep) { cs.Kind = 9 }), core.ErrInvalidArgument, []string{"step 1: collective kind 9"}},
		{"bad type", ar(func(cs *core.CollectiveStep) { cs.Type = 99 }), core.ErrInvalidArgument, []string{"step 1", "data type 99"}},
		{"bad reduction", ar(func(cs *core.CollectiveStep) { cs.Op = 77 }), core.ErrInvalidArgument, []string{"step 1", "reduction 77"}},
		{"bad root", ar(func(cs *core.CollectiveStep) { cs.Kind, cs.Root = core.CollBroadcast, 5 }), core.ErrInvalidArgument,
			[]string{"step 1", "root 5 of 2 ranks"}},
		{"ragged elements", ar(func(cs *core.CollectiveStep) { cs.Send, cs.Recv = odd, odd }), core.ErrInvalidArgument,
			[]string{"step 1", "not whole float32 elements"}},
		{"send and recv differ", ar(func(cs *core.CollectiveStep) { cs.Recv = short }), core.ErrInvalidArgument,
			[]string{"step 1", "does not fit 2 ranks"}},
		{"gather of the wrong size", ar(func(cs *core.CollectiveStep) { cs.Kind = core.CollAllGather }), core.ErrInvalidArgument,
			[]string{"step 1", "does not fit 2 ranks"}},
		{"freed recv", ar(func(cs *core.CollectiveStep) { cs.Send, cs.Recv = freed, freed }), core.ErrUnknownHandle,
			[]string{"step 1 recv"}},
		{"freed send", ar(func(cs *core.CollectiveStep) { cs.Send = freed }), core.ErrUnknownHandle, []string{"step 1 send"}},
		{"static recv", ar(func(cs *core.CollectiveStep) { cs.Recv = static.Bufs[0] }), core.ErrOwned, []string{"step 1 recv"}},
	}
}

// TestBatchCollectiveRefusalsChangeNothing: every malformed collective
// step is refused by Run, RunAsync and Capture before anything is queued
// or pinned: the buffers keep their bytes, nothing reaches the device, no
// stream is leased, and the communicator still works afterwards.
func TestBatchCollectiveRefusalsChangeNothing(t *testing.T) {
	g, m, ranks := openTrain(t, 2, 100)
	b, tr := ranks[0].b, ranks[0]
	cases := collRefusals(t, tr, ranks[1].comm)
	fillInputs(ranks, 0)
	require.NoError(t, b.Upload(core.UploadAt{Buf: tr.g, Data: tr.in}, core.UploadAt{Buf: tr.y, Data: tr.in}))
	before := deviceCalls(m.Device(0))
	run := map[string]func(core.Batch) error{
		"Run": func(bt core.Batch) error { _, err := b.Run(bt, nil); return err },
		"RunAsync": func(bt core.Batch) error {
			p, err := b.RunAsync(bt)
			if err == nil {
				_ = p.Close()
			}
			return err
		},
		"Capture": func(bt core.Batch) error {
			gr, err := b.Capture(bt)
			if err == nil {
				_ = gr.Close()
			}
			return err
		},
	}
	for _, c := range cases {
		for call, f := range run {
			batch := tr.batch()
			batch.Steps[1] = c.step
			err := f(batch)
			requireErrKind(t, err, c.kind, append([]string{call + ":"}, c.frags...)...)
			assert.Equal(t, before, deviceCalls(m.Device(0)), "%s %s: nothing reached the device", c.name, call)
			assert.Zero(t, b.LaunchResourceCounts().Leases, "%s %s", c.name, call)
		}
	}
	assert.Equal(t, tr.in, getBytes(t, b, tr.g), "g unchanged")
	assert.Equal(t, tr.in, getBytes(t, b, tr.y), "y unchanged")

	// The Comms still work, and a closed one is refused.
	want := fillInputs(ranks, 1)
	errs := onRanks(t, 2, "batches after the refusals", func(r int) error {
		out, err := ranks[r].b.Run(ranks[r].batch(), nil)
		if err == nil {
			assert.Equal(t, want, out[0], "rank %d", r)
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.NoError(t, tr.comm.Close())
	_, err := b.Run(tr.batch(), nil)
	requireErrKind(t, err, core.ErrClosed, "Run", "the Comm is closed")
	_, err = g.Comm(0)
	require.NoError(t, err, "the Group joins a new communicator")
}

// TestBatchCollectiveFaultsAbortAndLeakNothing fails one driver call of
// rank 0's training step at a time, before, at and after its all-reduce:
// rank 0 reports the driver's failure, rank 1 never hangs, both
// communicators are aborted (their Comms refuse calls), nothing is left in
// flight or leased (the cleanup frees every buffer and finds nothing live
// on the devices), and the Group's next communicator works.
func TestBatchCollectiveFaultsAbortAndLeakNothing(t *testing.T) {
	for _, async := range []bool{false, true} {
		fence := sim.OpStreamSynchronize // a blocking Run's; RunAsync's work is polled
		if async {
			fence = sim.OpEventQuery
		}
		for _, o := range []sim.Op{sim.OpMemcpyHtoDAsync, sim.OpLaunch, sim.OpAllReduce, sim.OpMemcpyDtoHAsync, fence} {
			name := fmt.Sprintf("%s async=%v", o, async)
			g, m, ranks := openTrain(t, 2, 100)
			fillInputs(ranks, 0)
			m.Device(0).FailNth(o, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			errs := onRanks(t, 2, name, func(r int) error {
				b := ranks[r].b
				if !async {
					_, err := b.Run(ranks[r].batch(), nil)
					return err
				}
				p, err := b.RunAsync(ranks[r].batch())
				if err != nil {
					return err
				}
				for {
					done, err := p.IsReady()
					if done {
						assert.NoError(t, p.Close())
						return err
					}
				}
			})
			m.Device(0).ClearFaults()
			requireKind(t, errs[0], core.ErrDriver)
			// Rank 1 fails too, or, when rank 0 failed after both parts
			// ran (its read, its fence), may have succeeded first.
			if o != fence && o != sim.OpMemcpyDtoHAsync {
				require.Error(t, errs[1], name)
			}
			for r, tr := range ranks {
				requireErrKind(t, tr.comm.AllReduce(tr.g, tr.g, core.DataFloat32, core.ReduceSum), core.ErrClosed, "aborted")
				assert.Zero(t, tr.b.LaunchResourceCounts().Leases, "%s rank %d", name, r)
			}
			for r, tr := range ranks {
				c, err := g.Comm(r)
				require.NoError(t, err)
				tr.comm = c
			}
			want := fillInputs(ranks, 1)
			errs = onRanks(t, 2, name+": the next batches", func(r int) error {
				out, err := ranks[r].b.Run(ranks[r].batch(), nil)
				if err == nil {
					assert.Equal(t, want, out[0], "%s rank %d", name, r)
				}
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "%s rank %d", name, r)
			}
		}
	}
}

// TestBatchCollectiveChecksAgreeAcrossRanks: with WithCollectiveChecks,
// batches whose collective steps differ fail alike on every rank before
// anything is queued; a rank whose batch is refused for another reason
// tells the others; matching batches then run, each exchange costing its
// fences.
func TestBatchCollectiveChecksAgreeAcrossRanks(t *testing.T) {
	_, m, ranks := openTrain(t, 2, 100, core.WithCollectiveChecks())
	small := make([]core.Buffer, 2)
	for r, tr := range ranks {
		small[r] = putBytes(t, tr.b, make([]byte, 40))
		t.Cleanup(func() { assert.NoError(t, tr.b.Free(small[r])) })
	}
	fillInputs(ranks, 0)
	errs := onRanks(t, 2, "mismatched batches", func(r int) error {
		batch := ranks[r].batch()
		if r == 1 {
			batch.Steps[1].Collective.Send, batch.Steps[1].Collective.Recv = small[1], small[1]
		}
		_, err := ranks[r].b.Run(batch, nil)
		return err
	})
	for _, err := range errs {
		requireErrKind(t, err, core.ErrInvalidArgument, "Run", "step 1:",
			"rank 0: AllReduce of 100 float32 (sum); rank 1: AllReduce of 10 float32 (sum)", "nothing was queued")
	}
	errs = onRanks(t, 2, "a refused batch", func(r int) error {
		batch := ranks[r].batch()
		if r == 1 {
			batch.Steps[2].Program = nil
		}
		_, err := ranks[r].b.Run(batch, nil)
		return err
	})
	requireErrKind(t, errs[0], core.ErrInvalidArgument, "rank 1: refused its part")
	requireErrKind(t, errs[1], core.ErrInvalidArgument, "step 2: program is nil")
	for r := range ranks {
		assert.Zero(t, m.Device(r).Calls(sim.OpLaunch), "rank %d: nothing queued", r)
	}

	want := fillInputs(ranks, 1)
	errs = onRanks(t, 2, "matching batches", func(r int) error {
		ranks[r].b.ResetTelemetry()
		out, err := ranks[r].b.Run(ranks[r].batch(), nil)
		if err == nil {
			assert.Equal(t, want, out[0], "rank %d", r)
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		tel := ranks[r].b.Telemetry()
		assert.Equal(t, uint64(4), tel.SyncPoints, "rank %d: the exchange's upload, all-gather and read, then the batch", r)
		assert.Equal(t, uint64(2), tel.Collectives, "rank %d: the exchange's all-gather and the step", r)
	}
	// A capture exchanges once, at Capture; its replays exchange nothing.
	graphs := captureRanks(t, ranks)
	want = fillInputs(ranks, 2)
	errs = onRanks(t, 2, "replays of checked captures", func(r int) error {
		ranks[r].b.ResetTelemetry()
		out, err := graphs[r].Replay(nil)
		if err == nil {
			assert.Equal(t, want, out[0], "rank %d", r)
			assert.Equal(t, uint64(1), ranks[r].b.Telemetry().SyncPoints, "rank %d", r)
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// TestGroupComm: Group.Comm refuses a bad index and a closed or nil Group,
// hands out one communicator's ranks until one is aborted or closed, and
// Group.Close closes them, refusing while a Graph holds one.
func TestGroupComm(t *testing.T) {
	g, _ := openMachine(t, 2, nil)
	var nilGroup *core.Group
	_, err := nilGroup.Comm(0)
	requireErrKind(t, err, core.ErrInvalidArgument, "Group.Comm", "nil")
	for _, i := range []int{-1, 2} {
		_, err := g.Comm(i)
		requireErrKind(t, err, core.ErrInvalidArgument, "Group.Comm", fmt.Sprintf("index %d of a group of 2", i))
	}
	c0, err := g.Comm(0)
	require.NoError(t, err)
	c1, err := g.Comm(1)
	require.NoError(t, err)
	again, err := g.Comm(0)
	require.NoError(t, err)
	assert.Same(t, c0, again)
	assert.Equal(t, []int{0, 1}, []int{c0.Rank(), c1.Rank()})

	b0 := g.Backends()[0]
	h := putBytes(t, b0, make([]byte, 16))
	gr, err := b0.Capture(core.Batch{Steps: []core.Step{{Collective: &core.CollectiveStep{Comm: c0, Send: h, Recv: h,
		Type: core.DataInt32, Op: core.ReduceSum}}}})
	require.NoError(t, err)
	requireErrKind(t, g.Close(), core.ErrInFlight, "Group.Close", "1 open Graph(s)")
	_, err = g.Comm(1)
	require.NoError(t, err, "the Group stays open")
	require.NoError(t, gr.Close())
	require.NoError(t, b0.Free(h))
	require.NoError(t, g.Close())
	requireErrKind(t, c1.AllReduce(core.Buffer{}, core.Buffer{}, core.DataInt32, core.ReduceSum), core.ErrClosed, "closed")
	_, err = g.Comm(0)
	requireErrKind(t, err, core.ErrClosed, "Group.Comm")
}

// TestBatchCollectiveFailureOnJoinedComms: ranks joined with JoinComm (as
// separate processes would) learn of rank 0's failure only through the
// communicator: rank 0's failed queue aborts it, rank 1's part then fails
// on the device instead of waiting, and rank 1's batch aborts its own
// Comm in turn. Nothing is left in flight.
func TestBatchCollectiveFailureOnJoinedComms(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	comms := joinAll(t, g)
	t.Cleanup(func() {
		for _, c := range comms {
			assert.NoError(t, c.Close())
		}
	})
	ranks := make([]*trainRank, 2)
	for r, b := range g.Backends() {
		ranks[r] = newTrainRank(t, b, comms[r], 100)
	}
	fillInputs(ranks, 0)
	m.Device(0).FailNth(sim.OpAllReduce, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	errs := onRanks(t, 2, "batches on joined communicators", func(r int) error {
		_, err := ranks[r].b.Run(ranks[r].batch(), nil)
		return err
	})
	requireErrKind(t, errs[0], core.ErrDriver, "Run", "step 1 (AllReduce, rank 0 of 2)")
	requireKind(t, errs[1], core.ErrDriver)
	for r, tr := range ranks {
		requireErrKind(t, tr.comm.AllReduce(tr.g, tr.g, core.DataFloat32, core.ReduceSum), core.ErrClosed, "aborted")
		assert.Zero(t, tr.b.LaunchResourceCounts().Leases, "rank %d", r)
	}
}
