package core_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// trainRank is one rank's buffers of the training-step batch: the input
// x, the gradient g (all-reduced in place) and the output y, n float32
// each.
type trainRank struct {
	b       *core.Backend
	comm    *core.Comm
	x, g, y core.Buffer
	in      []byte // the upload source, rewritten between runs
}

func newTrainRank(t testing.TB, b *core.Backend, comm *core.Comm, n int) *trainRank {
	t.Helper()
	r := &trainRank{b: b, comm: comm, in: make([]byte, 4*n)}
	for _, h := range []*core.Buffer{&r.x, &r.g, &r.y} {
		var err error
		*h, err = b.Alloc(4 * n)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, h := range []core.Buffer{r.x, r.g, r.y} {
			assert.NoError(t, b.Free(h), "nothing left in flight")
		}
	})
	return r
}

func scaleStep(src, dst core.Buffer, f float32) core.Step {
	return core.Step{Program: core.ProgramScaleF32(), Config: core.DispatchConfig{
		Args: []core.Arg{core.ArgBuffer(src), core.ArgBuffer(dst), core.ArgFloat32(f)}}}
}

// batch is the training step: upload x, g = 3x, all-reduce g (sum), y =
// g/4, read y.
func (r *trainRank) batch() core.Batch {
	return core.Batch{
		Uploads: []core.UploadAt{{Buf: r.x, Data: r.in}},
		Steps: []core.Step{
			scaleStep(r.x, r.g, 3),
			{Collective: &core.CollectiveStep{Comm: r.comm, Kind: core.CollAllReduce, Send: r.g, Recv: r.g,
				Type: core.DataFloat32, Op: core.ReduceSum}},
			scaleStep(r.g, r.y, 0.25),
		},
		Reads: []core.Range{r.y.All()},
	}
}

// fillInputs writes run k's inputs into every rank's upload source and
// returns the output every rank must read: 3/4 of the inputs' sum.
func fillInputs(ranks []*trainRank, k int) []byte {
	n := len(ranks[0].in) / 4
	sum := make([]float32, n)
	for r, tr := range ranks {
		for i := 0; i < n; i++ {
			v := float32((i*7+r*13+k*5)%97) - 40
			binary.LittleEndian.PutUint32(tr.in[4*i:], math.Float32bits(v))
			sum[i] += v
		}
	}
	want := make([]byte, 4*n)
	for i, v := range sum {
		binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(3*v/4))
	}
	return want
}

// openTrain opens n simulated devices and a training rank on each, over
// Group.Comm's communicator.
func openTrain(t *testing.T, n, elems int, opts ...core.Option) (*core.Group, *sim.Machine, []*trainRank) {
	t.Helper()
	m, err := sim.NewMachine(sim.MachineConfig{Devices: n, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), append(opts, core.WithLogger(quietLogger))...)
	require.NoError(t, err)
	ranks := make([]*trainRank, n)
	t.Cleanup(func() {
		_ = g.Close() // a test that closed it already gets ErrClosed
		sim.RequireMachineNoLeaks(t, m)
	})
	for r, b := range g.Backends() {
		c, err := g.Comm(r)
		require.NoError(t, err)
		assert.Equal(t, r, c.Rank())
		assert.Equal(t, n, c.Size())
		ranks[r] = newTrainRank(t, b, c, elems)
	}
	return g, m, ranks
}

// TestBatchTrainingStepOnEveryRank: every rank runs upload, kernel,
// all-reduce, kernel and read as one batch, on a goroutine of its own,
// with Run and with RunAsync, and reads what the host works out; each
// batch is one stream with one fence, and Telemetry counts its collective
// apart from its kernels.
func TestBatchTrainingStepOnEveryRank(t *testing.T) {
	for _, n := range []int{2, 3} {
		_, m, ranks := openTrain(t, n, 1000)
		for k := 0; k < 4; k++ {
			want := fillInputs(ranks, k)
			async := k%2 == 1
			outs := make([][]byte, n)
			errs := onRanks(t, n, "the training-step batches", func(r int) error {
				tr := ranks[r]
				tr.b.ResetTelemetry()
				if !async {
					out, err := tr.b.Run(tr.batch(), nil)
					if err == nil {
						outs[r] = out[0]
					}
					return err
				}
				p, err := tr.b.RunAsync(tr.batch())
				if err != nil {
					return err
				}
				out, err := p.AwaitInto(nil)
				if err == nil {
					outs[r] = out[0]
				}
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "n=%d run %d rank %d", n, k, r)
				assert.Equal(t, want, outs[r], "n=%d run %d rank %d", n, k, r)
				tel := ranks[r].b.Telemetry()
				assert.Equal(t, uint64(1), tel.Collectives, "rank %d", r)
				assert.Equal(t, uint64(2), tel.KernelLaunches, "rank %d", r)
				assert.Equal(t, uint64(1), tel.SyncPoints, "rank %d: one fence", r)
			}
		}
		for r := range ranks {
			assert.Equal(t, uint64(4), m.Device(r).Calls(sim.OpAllReduce), "n=%d rank %d", n, r)
			assert.Zero(t, ranks[r].b.LaunchResourceCounts().Leases)
		}
	}
}

// TestBatchCollectiveEveryKind runs each collective as the middle step of
// a batch on three ranks (broadcast from rank 1, whose peers pass no
// send buffer) and checks every rank's recv against the host.
func TestBatchCollectiveEveryKind(t *testing.T) {
	const n = 3
	g, _, _ := openTrain(t, n, 4)
	bs := g.Backends()
	own := func(r, k int) []int32 { // rank r's k values
		v := make([]int32, k)
		for i := range v {
			v[i] = int32(10*r + i + 1)
		}
		return v
	}
	type kase struct {
		kind         core.CollectiveKind
		sendN, recvN int
		want         func(r int) []int32
		root         int
		inPlace      bool
	}
	cases := []kase{
		{kind: core.CollAllReduce, sendN: 4, recvN: 4, want: func(int) []int32 { return []int32{33, 36, 39, 42} }},
		{kind: core.CollAllReduce, sendN: 4, recvN: 4, inPlace: true, want: func(int) []int32 { return []int32{33, 36, 39, 42} }},
		{kind: core.CollBroadcast, sendN: 4, recvN: 4, root: 1, want: func(int) []int32 { return own(1, 4) }},
		{kind: core.CollAllGather, sendN: 2, recvN: 6, want: func(int) []int32 { return []int32{1, 2, 11, 12, 21, 22} }},
		{kind: core.CollReduceScatter, sendN: 6, recvN: 2, want: func(r int) []int32 {
			return []int32{33 + 6*int32(r), 36 + 6*int32(r)} // block r of {33,36,39,42,45,48}
		}},
	}
	for _, c := range cases {
		sends, recvs := make([]core.Buffer, n), make([]core.Buffer, n)
		for r, b := range bs {
			sends[r] = putBytes(t, b, i32Bytes(own(r, c.sendN)))
			recvs[r] = sends[r]
			if !c.inPlace {
				recvs[r] = putBytes(t, b, make([]byte, 4*c.recvN))
			}
		}
		errs := onRanks(t, n, c.kind.String()+" steps", func(r int) error {
			comm, err := g.Comm(r)
			if err != nil {
				return err
			}
			cs := &core.CollectiveStep{Comm: comm, Kind: c.kind, Send: sends[r], Recv: recvs[r], Type: core.DataInt32,
				Op: core.ReduceSum, Root: c.root}
			if c.kind == core.CollBroadcast && r != c.root {
				cs.Send = core.Buffer{}
			}
			batch := core.Batch{Steps: []core.Step{{Collective: cs}}, Reads: []core.Range{recvs[r].All()}}
			if !c.inPlace {
				batch.Fills = []core.Fill{{Buf: recvs[r], Value: 0xff}} // before the collective, which overwrites it
			}
			out, err := bs[r].Run(batch, nil)
			if err == nil {
				assert.Equal(t, i32Bytes(c.want(r)), out[0], "%s rank %d", c.kind, r)
			}
			return err
		})
		for r, err := range errs {
			require.NoError(t, err, "%s rank %d", c.kind, r)
			require.NoError(t, bs[r].Free(sends[r]))
			if !c.inPlace {
				require.NoError(t, bs[r].Free(recvs[r]))
			}
		}
	}
}
