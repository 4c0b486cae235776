//go:build gpu

// Collective steps of batches and graphs on real devices, over NCCL: the
// training-step batch run and replayed on every GPU, and its benchmark
// beside the same work as separate calls. Both skip with fewer than two
// devices. Run:
//
//	.gpu/core.test -test.run 'GPUMultiDeviceTrainingStep' -test.v
//	.gpu/core.test -test.run '^$' -test.bench 'GPUTrainingStep' -test.benchtime 50x

package core_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// gpuComms returns Group.Comm's rank of every device, skipping without
// NCCL.
func gpuComms(tb testing.TB, g *core.Group) []*core.Comm {
	tb.Helper()
	comms := make([]*core.Comm, g.Len())
	for r := range comms {
		c, err := g.Comm(r)
		if t, ok := tb.(*testing.T); ok {
			skipWithoutNCCL(t, err)
		}
		require.NoError(tb, err)
		comms[r] = c
	}
	return comms
}

// TestGPUMultiDeviceTrainingStep runs the training-step batch (upload,
// kernel, all-reduce, kernel, read) on every GPU, one goroutine each, with
// Run and RunAsync, then captures it on every GPU and replays the graphs
// with new inputs; every rank reads what the host works out.
func TestGPUMultiDeviceTrainingStep(t *testing.T) {
	g := openAllGPUs(t, 2)
	n := g.Len()
	comms := gpuComms(t, g)
	ranks := make([]*trainRank, n)
	for r, b := range g.Backends() {
		ranks[r] = newTrainRank(t, b, comms[r], 1<<20)
	}
	check := func(what string, k int, run func(r int) ([]byte, error)) {
		want := fillInputs(ranks, k)
		outs := make([][]byte, n)
		errs := onRanks(t, n, what, func(r int) error {
			out, err := run(r)
			outs[r] = out
			return err
		})
		for r, err := range errs {
			require.NoError(t, err, "%s %d rank %d", what, k, r)
			require.True(t, bytesEqual(want, outs[r]), "%s %d rank %d: output differs from the host's", what, k, r)
		}
	}
	for k := 0; k < 3; k++ {
		check("Run", k, func(r int) ([]byte, error) {
			out, err := ranks[r].b.Run(ranks[r].batch(), nil)
			if err != nil {
				return nil, err
			}
			return out[0], nil
		})
	}
	check("RunAsync", 3, func(r int) ([]byte, error) {
		p, err := ranks[r].b.RunAsync(ranks[r].batch())
		if err != nil {
			return nil, err
		}
		out, err := p.AwaitInto(nil)
		if err != nil {
			return nil, err
		}
		return out[0], nil
	})
	graphs := make([]*core.Graph, n)
	errs := onRanks(t, n, "the captures", func(r int) error {
		var err error
		graphs[r], err = ranks[r].b.Capture(ranks[r].batch())
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "capture rank %d", r)
	}
	for k := 4; k < 8; k++ {
		check("Replay", k, func(r int) ([]byte, error) {
			out, err := graphs[r].Replay(nil)
			if err != nil {
				return nil, err
			}
			return out[0], nil
		})
	}
	for _, gr := range graphs {
		require.NoError(t, gr.Close())
	}
	for r, tr := range ranks {
		c := tr.b.LaunchResourceCounts()
		require.Zero(t, c.Leases, "rank %d: every lease back once the graphs are closed: %+v", r, c)
	}
}

// stepRank is one device's buffers of the benchmark's training step:
// upload into x (1 MiB), h = 2x, all-reduce grad (64 MiB float32), y =
// grad[:1 MiB]/2, read y (1 MiB).
type stepRank struct {
	b             *core.Backend
	comm          *core.Comm
	x, h, grad, y core.Buffer
	in            []byte
}

const (
	stepIOBytes   = 1 << 20
	stepGradBytes = 64 << 20
)

func newStepRank(tb testing.TB, b *core.Backend, comm *core.Comm) *stepRank {
	tb.Helper()
	s := &stepRank{b: b, comm: comm, in: pattern(stepIOBytes, 3)}
	for _, p := range []struct {
		h *core.Buffer
		n int
	}{{&s.x, stepIOBytes}, {&s.h, stepIOBytes}, {&s.grad, stepGradBytes}, {&s.y, stepIOBytes}} {
		var err error
		*p.h, err = b.Alloc(p.n)
		require.NoError(tb, err)
	}
	require.NoError(tb, b.Upload(core.UploadAt{Buf: s.grad, Data: make([]byte, stepGradBytes)}))
	tb.Cleanup(func() {
		for _, h := range []core.Buffer{s.x, s.h, s.grad, s.y} {
			require.NoError(tb, b.Free(h))
		}
	})
	return s
}

func (s *stepRank) batch() core.Batch {
	return core.Batch{
		Uploads: []core.UploadAt{{Buf: s.x, Data: s.in}},
		Steps: []core.Step{
			scaleStep(s.x, s.h, 2),
			{Collective: &core.CollectiveStep{Comm: s.comm, Kind: core.CollAllReduce, Send: s.grad, Recv: s.grad,
				Type: core.DataFloat32, Op: core.ReduceSum}},
			scaleStep(s.grad, s.y, 0.5),
		},
		Reads: []core.Range{s.y.All()},
	}
}

// separate is the same step as separate calls, each with its own fence.
func (s *stepRank) separate(out []byte) ([]byte, error) {
	if err := s.b.Upload(core.UploadAt{Buf: s.x, Data: s.in}); err != nil {
		return out, err
	}
	st := s.batch().Steps
	if err := s.b.Dispatch(st[0].Program, nil, st[0].Config); err != nil {
		return out, err
	}
	if err := s.comm.AllReduce(s.grad, s.grad, core.DataFloat32, core.ReduceSum); err != nil {
		return out, err
	}
	if err := s.b.Dispatch(st[2].Program, nil, st[2].Config); err != nil {
		return out, err
	}
	return s.b.Download(s.y.All(), out)
}

// BenchmarkGPUTrainingStep times one training step on every GPU (upload 1
// MiB, kernel, all-reduce of 64 MiB float32, kernel, read 1 MiB), each
// device driven by a goroutine of its own: as separate calls (five
// fences per device), as one Batch per device (one fence), and replayed
// from a graph per device. busGB/s is the all-reduce's bus bandwidth were
// the whole step spent in it.
func BenchmarkGPUTrainingStep(b *testing.B) {
	g := openAllGPUs(b, 2)
	n := g.Len()
	comms := gpuComms(b, g)
	ranks := make([]*stepRank, n)
	for r, be := range g.Backends() {
		ranks[r] = newStepRank(b, be, comms[r])
	}
	onEach := func(b *testing.B, step func(r int, out []byte) ([]byte, error)) {
		outs := make([][]byte, n)
		errs := make([]error, n)
		run := func() {
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[r], errs[r] = step(r, outs[r][:0])
				}()
			}
			wg.Wait()
			for r, err := range errs {
				require.NoError(b, err, "rank %d", r)
			}
		}
		run() // warm: communicator connections, staging, modules
		b.SetBytes(stepGradBytes)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			run()
		}
		sec := time.Since(start).Seconds() / float64(b.N)
		b.ReportMetric(2*float64(n-1)/float64(n)*stepGradBytes/sec/1e9, "busGB/s")
	}
	b.Run("separate", func(b *testing.B) {
		onEach(b, func(r int, out []byte) ([]byte, error) { return ranks[r].separate(out) })
	})
	b.Run("batch", func(b *testing.B) {
		onEach(b, func(r int, out []byte) ([]byte, error) {
			res, err := ranks[r].b.Run(ranks[r].batch(), [][]byte{out})
			if err != nil {
				return out, err
			}
			return res[0], nil
		})
	})
	b.Run("graph", func(b *testing.B) {
		graphs := make([]*core.Graph, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				graphs[r], errs[r] = ranks[r].b.Capture(ranks[r].batch())
			}()
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(b, err, "capture rank %d", r)
		}
		defer func() {
			for _, gr := range graphs {
				require.NoError(b, gr.Close())
			}
		}()
		onEach(b, func(r int, out []byte) ([]byte, error) {
			res, err := graphs[r].Replay([][]byte{out})
			if err != nil {
				return out, err
			}
			return res[0], nil
		})
	})
}

// BenchmarkGPUAllReduceQueued reports NCCL's bus bandwidth for in-place
// float32 all-reduces of 256 MiB per device issued one goroutine per
// device, as separate processes issue them: each op of the benchmark is one
// Batch per device of q all-reduce steps (Group.Comm's ranks) and one fence
// per device. q=20 queues them as torch.distributed's loop does; q=1 fences
// every all-reduce, as Group.AllReduce does. Compare with
// BenchmarkGPUAllReduce (one goroutine for every device, one fence per
// all-reduce) and scripts/bench_multi_torch.py in the same command.
func BenchmarkGPUAllReduceQueued(b *testing.B) {
	const size = 256 << 20
	g := openAllGPUs(b, 2)
	n := g.Len()
	comms := gpuComms(b, g)
	bufs := make([]core.Buffer, n)
	for r, be := range g.Backends() {
		h, err := be.Alloc(size)
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, be.Free(h)) })
		bufs[r] = h
	}
	for _, q := range []int{1, 20} {
		b.Run(fmt.Sprintf("q=%d", q), func(b *testing.B) {
			batches := make([]core.Batch, n)
			for r := range batches {
				step := core.Step{Collective: &core.CollectiveStep{Comm: comms[r], Kind: core.CollAllReduce,
					Send: bufs[r], Recv: bufs[r], Type: core.DataFloat32, Op: core.ReduceSum}}
				for range q {
					batches[r].Steps = append(batches[r].Steps, step)
				}
			}
			run := func() {
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, be := range g.Backends() {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[r] = be.Run(batches[r], nil)
					}()
				}
				wg.Wait()
				for r, err := range errs {
					require.NoError(b, err, "rank %d", r)
				}
			}
			run() // connects the communicators
			b.SetBytes(int64(size * q))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				run()
			}
			sec := time.Since(start).Seconds() / float64(b.N*q)
			b.ReportMetric(2*float64(n-1)/float64(n)*size/sec/1e9, "busGB/s")
			b.ReportMetric(size/sec/1e9, "algGB/s")
		})
	}
}
