package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// simRanks opens a Backend on each of n devices of one simulated machine,
// closed (and checked for leaks) at cleanup.
func simRanks(t *testing.T, n int) ([]*core.Backend, *sim.Machine) {
	t.Helper()
	m, err := sim.NewMachine(sim.MachineConfig{Devices: n, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	bs := make([]*core.Backend, n)
	for i := range bs {
		bs[i], err = core.Open(m.Device(i))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, b := range bs {
			assert.NoError(t, b.Close())
		}
		sim.RequireMachineNoLeaks(t, m)
	})
	return bs, m
}

// launcherEnv is rank's variables for a job of world ranks on one host
// whose rank 0 serves at 127.0.0.1:port, as launcher l sets them.
func launcherEnv(l Launcher, rank, world, port int) vars {
	r, w, p := strconv.Itoa(rank), strconv.Itoa(world), strconv.Itoa(port)
	switch l {
	case Slurm:
		return vars{"SLURM_PROCID": r, "SLURM_NTASKS": w, "SLURM_LOCALID": r, "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1", "MASTER_PORT": p}
	case OpenMPI:
		return vars{"OMPI_COMM_WORLD_RANK": r, "OMPI_COMM_WORLD_SIZE": w, "OMPI_COMM_WORLD_LOCAL_RANK": r,
			"OMPI_COMM_WORLD_LOCAL_SIZE": w, "MASTER_PORT": p}
	}
	// Under torchrun rank 0 serves at MASTER_PORT+1.
	return vars{"RANK": r, "WORLD_SIZE": w, "LOCAL_RANK": r, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port - 1),
		"TORCHELASTIC_RUN_ID": "test"}
}

// allReduceChecked all-reduces n float32 elements, rank r contributing
// (r+1)*(i%5+1) at element i, and checks every element of the result on the
// host against world*(world+1)/2*(i%5+1) (small integers: exact in any
// order of summation).
func allReduceChecked(b *core.Backend, c *core.Comm, n int) error {
	r, world := c.Rank(), c.Size()
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32((r+1)*(i%5+1))))
	}
	h, err := b.Alloc(len(data))
	if err != nil {
		return err
	}
	defer b.Free(h)
	if err := b.Upload(core.UploadAt{Buf: h, Data: data}); err != nil {
		return err
	}
	if err := c.AllReduce(h, h, core.DataFloat32, core.ReduceSum); err != nil {
		return err
	}
	out, err := b.Download(h.All(), nil)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		if want := float32(world * (world + 1) / 2 * (i%5 + 1)); got != want {
			return fmt.Errorf("rank %d: element %d is %v, want %v", r, i, got, want)
		}
	}
	return nil
}

// TestJoinOnLoopback: for each launcher's variables, three ranks (one
// goroutine each, on the devices of one simulated machine) find rank 0
// over loopback TCP, join one communicator and all-reduce, checked on the
// host. Rank 0 starts last, so the others retry.
func TestJoinOnLoopback(t *testing.T) {
	for _, l := range []Launcher{Torchrun, Slurm, OpenMPI} {
		t.Run(l.String(), func(t *testing.T) {
			const world = 3
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			bs, m := simRanks(t, world)
			port := freePort(t)
			errs := make([]error, world)
			var wg sync.WaitGroup
			for r := world - 1; r >= 0; r-- {
				e, err := parseEnv(launcherEnv(l, r, world, port).lookup)
				require.NoError(t, err)
				require.Equal(t, Env{Rank: r, WorldSize: world, LocalRank: r, MasterAddr: "127.0.0.1", MasterPort: port, Launcher: l}, e)
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := e.Join(ctx, bs[r])
					if err != nil {
						errs[r] = err
						return
					}
					errs[r] = errors.Join(allReduceChecked(bs[r], c, 1000), c.Close())
				}()
				time.Sleep(20 * time.Millisecond)
			}
			wg.Wait()
			for r, err := range errs {
				assert.NoError(t, err, "rank %d", r)
			}
			assert.Equal(t, uint64(1), m.Device(0).Calls(sim.OpNewCommID), "rank 0 makes the id")
			assert.Zero(t, m.Device(1).Calls(sim.OpNewCommID)+m.Device(2).Calls(sim.OpNewCommID))
		})
	}
}

// TestJoinOneRank: a job of one rank needs no master and no network.
func TestJoinOneRank(t *testing.T) {
	bs, _ := simRanks(t, 1)
	c, err := Env{WorldSize: 1, Launcher: Torchrun}.Join(context.Background(), bs[0])
	require.NoError(t, err)
	assert.Equal(t, 1, c.Size())
	require.NoError(t, allReduceChecked(bs[0], c, 10))
	require.NoError(t, c.Close())
}

// TestJoinReadsTheEnvironment: cluster.Join takes the process's launcher
// variables, and names itself in FromEnv's failure.
func TestJoinReadsTheEnvironment(t *testing.T) {
	bs, _ := simRanks(t, 1)
	setLauncherEnv(t, vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
	c, err := Join(context.Background(), bs[0])
	require.NoError(t, err)
	assert.Equal(t, 0, c.Rank())
	require.NoError(t, c.Close())
	setLauncherEnv(t, vars{"RANK": "x"})
	c, err = Join(context.Background(), bs[0])
	assert.Nil(t, c)
	requireEnvError(t, "cluster.Join", err, `RANK="x"`)
}

// TestJoinRefusesBadInput: a nil context or Backend and an Env FromEnv
// would not return are refused before anything is created.
func TestJoinRefusesBadInput(t *testing.T) {
	bs, m := simRanks(t, 1)
	good := Env{WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1}
	type joinCase struct {
		ctx  context.Context
		b    *core.Backend
		e    Env
		want string
	}
	cases := map[string]joinCase{
		"nil context":  {nil, bs[0], good, "the context is nil"},
		"nil Backend":  {context.Background(), nil, good, "the Backend is nil"},
		"rank >= size": {context.Background(), bs[0], Env{Rank: 2, WorldSize: 2, MasterAddr: "h", MasterPort: 1}, "rank 2 of 2 ranks"},
		"no ranks":     {context.Background(), bs[0], Env{}, "rank 0 of 0 ranks"},
		"local above":  {context.Background(), bs[0], Env{Rank: 1, LocalRank: 2, WorldSize: 4, MasterAddr: "h", MasterPort: 1}, "local rank 2 with rank 1"},
		"no master":    {context.Background(), bs[0], Env{WorldSize: 2, MasterPort: 1}, `master "" port 1 for 2 ranks`},
		"port 0":       {context.Background(), bs[0], Env{WorldSize: 2, MasterAddr: "h"}, "port 0"},
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	cases["done context"] = joinCase{done, bs[0], good, "the context is already done"}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			comm, err := c.e.Join(c.ctx, c.b)
			assert.Nil(t, comm)
			requireEnvError(t, "cluster.Join", err, c.want)
		})
	}
	assert.Zero(t, m.Device(0).Calls(sim.OpNewCommID))
}

// TestJoinRankZeroAlone: a rank that never comes fails rank 0 at the
// deadline, naming it; nothing is joined.
func TestJoinRankZeroAlone(t *testing.T) {
	bs, m := simRanks(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e := Env{WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: freePort(t)}
	c, err := e.Join(ctx, bs[0])
	assert.Nil(t, c)
	requireEnvError(t, "cluster.Join", err, "rank 0 of 3 waited", "ranks [1 2] never fetched the communicator id", "longer deadline")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, m.Device(0).Calls(sim.OpJoinCommunicator))
	ln, err := net.Listen("tcp", e.Master())
	require.NoError(t, err, "rank 0 stopped listening")
	require.NoError(t, ln.Close())
}

// TestJoinWithoutRankZero: a rank whose rank 0 never answers fails at the
// deadline, saying what its last attempt met.
func TestJoinWithoutRankZero(t *testing.T) {
	bs, m := simRanks(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e := Env{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: freePort(t)}
	c, err := e.Join(ctx, bs[0])
	assert.Nil(t, c)
	requireEnvError(t, "cluster.Join", err, "rank 1 of 2, rank 0 at "+e.Master()+": no communicator id after", "connection refused")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, m.Device(0).Calls(sim.OpJoinCommunicator))
}

// TestJoinPortTaken: rank 0 that cannot listen fails at once, before it
// creates an id.
func TestJoinPortTaken(t *testing.T) {
	bs, m := simRanks(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	e := Env{WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: ln.Addr().(*net.TCPAddr).Port}
	c, err := e.Join(context.Background(), bs[0])
	assert.Nil(t, c)
	requireEnvError(t, "cluster.Join", err, "rank 0 cannot serve the communicator id at "+e.Master(), "MASTER_PORT that is free")
	assert.Zero(t, m.Device(0).Calls(sim.OpNewCommID))
}

// TestJoinDriverFailures: a failed NewCommID leaves rank 0 no longer
// listening; a failed join is reported under cluster.Join.
func TestJoinDriverFailures(t *testing.T) {
	bs, m := simRanks(t, 1)
	m.Device(0).FailNth(sim.OpNewCommID, 1, 999)
	e := Env{WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: freePort(t)}
	c, err := e.Join(context.Background(), bs[0])
	assert.Nil(t, c)
	var ce *core.Error
	require.True(t, errors.As(err, &ce), "want *core.Error, got %v", err)
	assert.Equal(t, "cluster.Join", ce.Op)
	ln, lerr := net.Listen("tcp", e.Master())
	require.NoError(t, lerr, "rank 0 stopped listening")
	require.NoError(t, ln.Close())

	m.Device(0).FailNth(sim.OpJoinCommunicator, 1, 999)
	c, err = Env{WorldSize: 1}.Join(context.Background(), bs[0])
	assert.Nil(t, c)
	require.True(t, errors.As(err, &ce), "want *core.Error, got %v", err)
	assert.Equal(t, "cluster.Join", ce.Op)
	assert.ErrorIs(t, err, core.ErrDriver)
}

// TestJoinRefusedByRankZero: a rank of a job of another size is refused by
// rank 0 at once, with the reason.
func TestJoinRefusedByRankZero(t *testing.T) {
	bs, _ := simRanks(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port := freePort(t)
	rank0 := make(chan error, 1)
	sctx, scancel := context.WithCancel(ctx)
	go func() {
		_, err := Env{WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}.Join(sctx, bs[0])
		rank0 <- err
	}()
	c, err := Env{Rank: 1, WorldSize: 3, MasterAddr: "127.0.0.1", MasterPort: port}.Join(ctx, bs[1])
	assert.Nil(t, c)
	requireEnvError(t, "cluster.Join", err, "rank 0 refused: the caller's job has 3 ranks, rank 0's has 2", "same WORLD_SIZE")
	scancel()
	assert.ErrorIs(t, <-rank0, context.Canceled)
}
