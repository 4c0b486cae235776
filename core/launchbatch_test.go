package core_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// batchCounter is the simulated device counting its LaunchBatch calls, so a
// test can tell the Backend took the batched path.
type batchCounter struct {
	*sim.Device
	batches atomic.Int64
}

func (d *batchCounter) LaunchBatch(s core.Stream, ls []core.Launch) (int, error) {
	d.batches.Add(1)
	return d.Device.LaunchBatch(s, ls)
}

// perLaunchOnly hides the simulated device's LaunchBatch, leaving the Driver
// and its host-kernel binding: the Backend falls back to one Launch per step.
type perLaunchOnly struct {
	core.Driver
	core.HostKernelBinder
}

// launchArm is one way of opening a Backend over a fresh simulated device.
type launchArm struct {
	name    string
	batched bool
	open    func(dev *sim.Device) (core.Driver, *atomic.Int64)
}

var launchArms = []launchArm{
	{"LaunchBatch", true, func(dev *sim.Device) (core.Driver, *atomic.Int64) {
		d := &batchCounter{Device: dev}
		return d, &d.batches
	}},
	{"per launch", false, func(dev *sim.Device) (core.Driver, *atomic.Int64) {
		return perLaunchOnly{Driver: dev, HostKernelBinder: dev}, new(atomic.Int64)
	}},
}

// pingPong is W5's shape: steps dependent vadd launches alternating between
// p and q, each adding one.
func pingPong(p, q, one core.Buffer, steps int) []core.Step {
	out := make([]core.Step, steps)
	for i := range out {
		src, dst := p, q
		if i%2 == 1 {
			src, dst = q, p
		}
		out[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{src, one, dst}}
	}
	return out
}

// launchFixture is a Backend over one arm's driver with W5's three buffers.
type launchFixture struct {
	b         *core.Backend
	dev       *sim.Device
	batches   *atomic.Int64
	p, q, one core.Buffer
	words     int
}

func newLaunchFixture(t *testing.T, arm launchArm) *launchFixture {
	t.Helper()
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	drv, batches := arm.open(dev)
	b, err := core.Open(drv, core.WithLogger(quietLogger))
	require.NoError(t, err)
	f := &launchFixture{b: b, dev: dev, batches: batches, words: 64}
	ones := make([]uint32, f.words)
	for i := range ones {
		ones[i] = 1
	}
	f.p = writtenResident(t, b, dev, u32s(make([]uint32, f.words)...))
	f.q = writtenResident(t, b, dev, u32s(make([]uint32, f.words)...))
	f.one = writtenResident(t, b, dev, u32s(ones...))
	dev.ResetCalls()
	t.Cleanup(func() {
		for _, h := range []core.Buffer{f.p, f.q, f.one} {
			assert.NoError(t, b.Free(h))
		}
		require.NoError(t, b.Close())
		assert.True(t, dev.Live().Zero(), "live after Close: %v", dev.Live())
	})
	return f
}

func TestRunLaunchBatchMatchesPerLaunch(t *testing.T) {
	const steps = 100
	type result struct {
		p, q      []byte
		launches  uint64
		tel       core.Telemetry
		simCounts map[sim.Op]uint64
	}
	results := map[string]result{}
	for _, arm := range launchArms {
		for _, async := range []bool{false, true} {
			name := fmt.Sprintf("%s async=%v", arm.name, async)
			t.Run(name, func(t *testing.T) {
				f := newLaunchFixture(t, arm)
				batch := core.Batch{Steps: pingPong(f.p, f.q, f.one, steps),
					Reads: []core.Range{{Buf: f.p, Len: 4 * f.words}, {Buf: f.q, Len: 4 * f.words}}}
				var out [][]byte
				var err error
				if async {
					var pd *core.Pending
					pd, err = f.b.RunAsync(batch)
					require.NoError(t, err)
					out, err = pd.AwaitInto(nil)
				} else {
					out, err = f.b.Run(batch, nil)
				}
				require.NoError(t, err)
				// Step i writes i+1: the last (odd) step wrote p, the one before q.
				want := func(v uint32) []uint32 {
					w := make([]uint32, f.words)
					for i := range w {
						w[i] = v
					}
					return w
				}
				assert.Equal(t, want(steps), words(out[0]))
				assert.Equal(t, want(steps-1), words(out[1]))
				if arm.batched {
					assert.Equal(t, int64(1), f.batches.Load(), "one LaunchBatch for the whole Batch")
				} else {
					assert.Zero(t, f.batches.Load())
				}
				counts := f.dev.CallCounts()
				if arm.batched {
					// Every step after the first follows a launch of the
					// batch and waits on its grid dependencies (a built-in
					// on a compute capability 9.0 device): it is queued
					// programmatic, which the per-launch path cannot do.
					assert.Equal(t, uint64(steps-1), counts[sim.OpLaunchProgrammatic])
					delete(counts, sim.OpLaunchProgrammatic)
				}
				results[name] = result{p: out[0], q: out[1], launches: f.dev.Calls(sim.OpLaunch),
					tel: f.b.Telemetry(), simCounts: counts}
			})
		}
	}
	for _, async := range []bool{false, true} {
		a := results[fmt.Sprintf("LaunchBatch async=%v", async)]
		b := results[fmt.Sprintf("per launch async=%v", async)]
		assert.Equal(t, b, a, "async=%v: the batched path gives the same bytes, telemetry and device calls", async)
		assert.Equal(t, uint64(steps), a.launches)
		assert.Equal(t, uint64(steps), a.tel.KernelLaunches)
	}
}

func TestRunLaunchFailureStopsAtTheStep(t *testing.T) {
	const steps = 100
	for _, arm := range launchArms {
		for _, k := range []int{1, 2, 50, steps} {
			t.Run(fmt.Sprintf("%s fails at launch %d", arm.name, k), func(t *testing.T) {
				f := newLaunchFixture(t, arm)
				f.dev.FailNth(sim.OpLaunch, k, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
				_, err := f.b.Run(core.Batch{Steps: pingPong(f.p, f.q, f.one, steps),
					Reads: []core.Range{{Buf: f.q, Len: 4}}}, nil)
				require.Error(t, err)
				assert.ErrorIs(t, err, core.ErrDriver)
				var e *core.Error
				require.True(t, errors.As(err, &e))
				assert.Equal(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, e.Code)
				assert.Contains(t, err.Error(), fmt.Sprintf("step %d (program", k-1))
				assert.NotEmpty(t, e.Fix)
				assert.Equal(t, uint64(k), f.dev.Calls(sim.OpLaunch), "nothing after the failing launch is attempted")
				assert.Zero(t, f.b.Telemetry().KernelLaunches, "a failed Run counts no launches")
				assert.Zero(t, f.b.LaunchResourceCounts().Leases, "the stream lease came back")
				// The k-1 launches queued before the failure ran (the drain
				// waited for them) and nothing after them did.
				p := deviceBytes(t, f.b, f.dev, f.p)
				q := deviceBytes(t, f.b, f.dev, f.q)
				wantP, wantQ := uint32(0), uint32(0)
				for i := 0; i < k-1; i++ {
					if i%2 == 0 {
						wantQ = wantP + 1
					} else {
						wantP = wantQ + 1
					}
				}
				assert.Equal(t, wantP, words(p)[0])
				assert.Equal(t, wantQ, words(q)[0])

				// The Backend still works afterwards.
				f.dev.ResetCalls()
				out, err := f.b.Run(core.Batch{Steps: pingPong(f.p, f.q, f.one, 2),
					Reads: []core.Range{{Buf: f.p, Len: 4}}}, nil)
				require.NoError(t, err)
				assert.Equal(t, []uint32{wantP + 2}, words(out[0]))
				assert.Equal(t, uint64(2), f.dev.Calls(sim.OpLaunch))
			})
		}
	}
}
