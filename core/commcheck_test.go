package core_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// openChecked opens a Group of n simulated devices with opts and joins
// every Backend as its rank of one communicator.
func openChecked(t *testing.T, n int, opts ...core.Option) (*core.Group, []*core.Comm) {
	t.Helper()
	m, err := sim.NewMachine(sim.MachineConfig{Devices: n, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), append(opts, core.WithLogger(quietLogger))...)
	require.NoError(t, err)
	comms := joinAll(t, g)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close() // tests may close them already
		}
		for _, b := range g.Backends() {
			sim.RequireNoLiveResident(t, b) // the checks' buffers went with the Comms
		}
		require.NoError(t, g.Close())
		sim.RequireMachineNoLeaks(t, m)
	})
	return g, comms
}

// onRanks runs call(r) for every rank r on its own goroutine and returns
// their errors.
func onRanks(t *testing.T, n int, what string, call func(r int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = call(r)
		}()
	}
	waitRanks(t, &wg, what)
	return errs
}

// TestCommChecksRefuseDifferentCallsOnEveryRank: with WithCollectiveChecks,
// ranks whose calls differ all fail with the same ErrInvalidArgument
// naming each rank's call, nothing is queued, and the communicator still
// works for calls that match. A rank that refuses its own arguments fails
// with its own error, and the others learn of it.
func TestCommChecksRefuseDifferentCallsOnEveryRank(t *testing.T) {
	g, comms := openChecked(t, 2, core.WithCollectiveChecks())
	bs := g.Backends()
	four := []core.Buffer{putBytes(t, bs[0], i32Bytes([]int32{1, 2, 3, 4})), putBytes(t, bs[1], i32Bytes([]int32{5, 6, 7, 8}))}
	two := putBytes(t, bs[1], i32Bytes([]int32{9, 9}))

	errs := onRanks(t, 2, "a count mismatch", func(r int) error {
		h := four[r]
		if r == 1 {
			h = two
		}
		return comms[r].AllReduce(h, h, core.DataInt32, core.ReduceSum)
	})
	for _, err := range errs {
		requireErrKind(t, err, core.ErrInvalidArgument, "Comm.AllReduce",
			"rank 0: AllReduce of 4 int32 (sum); rank 1: AllReduce of 2 int32 (sum)", "nothing was queued")
	}

	errs = onRanks(t, 2, "a kind mismatch", func(r int) error {
		if r == 0 {
			return comms[0].AllReduce(four[0], four[0], core.DataInt32, core.ReduceMax)
		}
		return comms[1].Broadcast(0, core.Buffer{}, four[1], core.DataInt32)
	})
	for _, err := range errs {
		requireErrKind(t, err, core.ErrInvalidArgument, "rank 0: AllReduce of 4 int32 (max); rank 1: Broadcast of 4 int32 from root 0")
	}

	errs = onRanks(t, 2, "a refused part", func(r int) error {
		dt := core.DataInt32
		if r == 1 {
			dt = core.DataType(99)
		}
		return comms[r].AllReduce(four[r], four[r], dt, core.ReduceSum)
	})
	requireErrKind(t, errs[0], core.ErrInvalidArgument, "rank 1: refused its part")
	requireErrKind(t, errs[1], core.ErrInvalidArgument, "data type 99")

	for r, b := range bs {
		assert.Equal(t, i32Bytes([]int32{int32(1 + 4*r), int32(2 + 4*r), int32(3 + 4*r), int32(4 + 4*r)}), getBytes(t, b, four[r]),
			"rank %d: nothing ran", r)
	}
	errs = onRanks(t, 2, "matching calls", func(r int) error {
		return comms[r].AllReduce(four[r], four[r], core.DataInt32, core.ReduceSum)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		assert.Equal(t, i32Bytes([]int32{6, 8, 10, 12}), getBytes(t, bs[r], four[r]), "rank %d", r)
		require.NoError(t, bs[r].Free(four[r]))
	}
	require.NoError(t, bs[1].Free(two))
}

// TestCommChecksFromTheEnvironment: CollectiveChecksEnv turns the checks
// on without the option. Without either, the simulated device finds the
// mismatch only when the parts meet, as a driver failure that aborts the
// communicator (on NCCL the ranks would hang instead).
func TestCommChecksFromTheEnvironment(t *testing.T) {
	mismatch := func(g *core.Group, comms []*core.Comm) []error {
		bs := g.Backends()
		bufs := []core.Buffer{putBytes(t, bs[0], make([]byte, 16)), putBytes(t, bs[1], make([]byte, 8))}
		errs := onRanks(t, 2, "a count mismatch", func(r int) error {
			return comms[r].AllReduce(bufs[r], bufs[r], core.DataFloat32, core.ReduceSum)
		})
		for r, b := range bs {
			require.NoError(t, b.Free(bufs[r]))
		}
		return errs
	}
	t.Run("on", func(t *testing.T) {
		t.Setenv(core.CollectiveChecksEnv, "1")
		g, comms := openChecked(t, 2)
		for _, err := range mismatch(g, comms) {
			requireErrKind(t, err, core.ErrInvalidArgument, "rank 0: AllReduce of 4 float32 (sum); rank 1: AllReduce of 2 float32 (sum)")
		}
	})
	t.Run("off", func(t *testing.T) {
		t.Setenv(core.CollectiveChecksEnv, "0")
		g, comms := openChecked(t, 2)
		for _, err := range mismatch(g, comms) {
			requireErrKind(t, err, core.ErrDriver)
		}
	})
}
