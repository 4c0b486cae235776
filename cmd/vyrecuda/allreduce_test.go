package main

import (
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cluster"
	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// launcherEnv makes the process environment hold exactly the launcher
// variables of kv for the rest of the test.
func launcherEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "VYRECUDA_MASTER_PORT", "TORCHELASTIC_RUN_ID",
		"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_LAUNCH_NODE_IPADDR",
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// TestAllreduceOneRank: a job of one rank joins, all-reduces and checks on
// the simulated device, with -device sim and with auto where no GPU is.
func TestAllreduceOneRank(t *testing.T) {
	launcherEnv(t, "RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "0")
	code, stdout, stderr := runCmd("allreduce", "-device", "sim", "-size", "4KiB", "-iters", "3")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "rank 0 of 1 (torchrun, simulated device): all-reduce of 4 KiB float32 checked on the host: ok; 3 timed: median ")

	stub(t, &chooseDevice, func() (core.DeviceChoice, error) {
		return core.DeviceChoice{Sim: true, Reason: "no GPU in this test"}, nil
	})
	code, stdout, stderr = runCmd("allreduce", "-size", "1KiB", "-iters", "0")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "rank 0 of 1 (torchrun, simulated device): all-reduce of 1 KiB float32 checked on the host: ok\n")
}

func TestAllreduceFailures(t *testing.T) {
	stub(t, &chooseDevice, func() (core.DeviceChoice, error) {
		return core.DeviceChoice{Sim: true, Reason: "no GPU in this test"}, nil
	})
	launcherEnv(t)
	code, _, stderr := runCmd("allreduce", "-device", "sim")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, stderr, "no launcher variables")

	launcherEnv(t, "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
		"OMPI_COMM_WORLD_LOCAL_SIZE", "2", "MASTER_PORT", "29500")
	code, stdout, stderr := runCmd("allreduce")
	assert.Equal(t, exitFail, code)
	assert.Contains(t, stderr, "rank 1 of 2: the simulated device joins no other process; run the ranks on GPUs (-device cuda); -device auto chose it: no GPU in this test")
	assert.Empty(t, stdout)

	for _, args := range [][]string{{"-size", "6"}, {"-iters", "-1"}, {"-timeout", "0s"}} {
		code, _, stderr := runCmd(append([]string{"allreduce"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.Contains(t, stderr, "want -iters >= 0")
	}
}

// TestAllreduceOpensTheLocalRanksGPU: with CUDA, rank 1 on a host of two
// GPUs opens GPU 1; more ranks than GPUs is refused.
func TestAllreduceOpensTheLocalRanksGPU(t *testing.T) {
	stub(t, &listDevices, func() ([]core.DeviceSummary, error) { return make([]core.DeviceSummary, 2), nil })
	opened := -1
	stub(t, &openCUDA, func(ordinal int, opts ...core.Option) (*core.Backend, core.Driver, error) {
		opened = ordinal
		d := sim.New(sim.Config{Ordinal: ordinal})
		b, err := core.Open(d, opts...)
		return b, d, err
	})
	s, err := openRank(deviceCUDA, cluster.Env{Rank: 1, WorldSize: 2, LocalRank: 1})
	require.NoError(t, err)
	assert.Equal(t, 1, opened)
	assert.Equal(t, deviceCUDA, s.Kind)
	require.NoError(t, s.Close())
	_, err = openRank(deviceCUDA, cluster.Env{Rank: 2, WorldSize: 3, LocalRank: 2})
	assert.ErrorContains(t, err, "local rank 2, but this process sees 2 CUDA devices")
}

// TestCheckSumsFindsAWrongElement: the host check fails on one element off.
func TestCheckSumsFindsAWrongElement(t *testing.T) {
	s, err := openSimSession(0, "", nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	b := s.Backend
	h, err := b.Alloc(40)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Free(h)) }()
	want := []float32{3, 6, 9, 12, 15, 3, 6, 9, 12, 15} // world 2: 3*(i%5+1)
	data := make([]byte, 4*len(want))
	for i, v := range want {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	require.NoError(t, checkSums(b, h, 2, make([]byte, 40)))
	data[4*7] ^= 1
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	assert.ErrorContains(t, checkSums(b, h, 2, make([]byte, 40)), "element 7 of the all-reduce")
}
