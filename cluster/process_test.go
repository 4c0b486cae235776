package cluster

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// helperVar, set in a child's environment, makes the test binary act as
// one rank of a job (rankMain) instead of running the tests.
const helperVar = "VYRECUDA_CLUSTER_TEST_RANK"

func TestMain(m *testing.M) {
	if os.Getenv(helperVar) != "" {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

// rankMain is one rank in its own process: it reads its launcher's
// variables, opens a simulated device and exchanges the communicator id
// with the other processes over loopback TCP, then prints the id. The
// simulated device joins communicators only among the devices of one
// process (sim.Machine), so the processes stop at the id: the join and the
// all-reduce after it are TestJoinOnLoopback's, in one process.
func rankMain() int {
	timeout, err := time.ParseDuration(os.Getenv(helperVar))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if os.Getenv(cudaVar) != "" {
		return cudaRankMain(ctx)
	}
	e, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, err := core.Open(sim.New(sim.Config{TotalMemory: 16 << 20}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	id, err := e.exchange(ctx, "cluster.Join", b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("rank %d of %d (%s) id %s\n", e.Rank, e.WorldSize, e.Launcher, hex.EncodeToString(id[:]))
	return 0
}

// cudaVar, set in a child's environment beside helperVar, makes the rank
// run the whole path on its GPU (cudaRankMain).
const cudaVar = "VYRECUDA_CLUSTER_TEST_CUDA"

// cudaRankMain is one rank on a GPU: Open, Join (NCCL across the
// processes) and an all-reduce checked on the host.
func cudaRankMain(ctx context.Context) int {
	b, e, err := Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	c, err := e.Join(ctx, b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := errors.Join(allReduceChecked(b, c, 1<<20), c.Close()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("rank %d of %d on GPU %d: all-reduce ok\n", e.Rank, e.WorldSize, b.DeviceInfo().Ordinal)
	return 0
}

// rankProcess is a started child and its outputs.
type rankProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startRank starts the test binary as one rank with v's launcher
// variables, and none inherited from this process.
func startRank(t *testing.T, ctx context.Context, v vars, timeout time.Duration) *rankProcess {
	t.Helper()
	p := &rankProcess{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^$")}
	for _, kv := range os.Environ() {
		if !slices.Contains(launcherNames, kv[:strings.IndexByte(kv+"=", '=')]) {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, helperVar+"="+timeout.String())
	for k, s := range v {
		p.cmd.Env = append(p.cmd.Env, k+"="+s)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// TestProcessesExchangeTheID: for each launcher, three processes on
// loopback, each with that launcher's variables, find rank 0 and end up
// holding the one id rank 0 created. Rank 0 starts last, so the others
// retry until it listens.
func TestProcessesExchangeTheID(t *testing.T) {
	for _, l := range []Launcher{Torchrun, Slurm, OpenMPI} {
		t.Run(l.String(), func(t *testing.T) {
			const world = 3
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			port := freePort(t)
			procs := make([]*rankProcess, world)
			for r := world - 1; r >= 0; r-- {
				procs[r] = startRank(t, ctx, launcherEnv(l, r, world, port), 30*time.Second)
			}
			ids := map[string]bool{}
			for r, p := range procs {
				require.NoError(t, p.cmd.Wait(), "rank %d: %s", r, p.stderr.String())
				line := strings.TrimSpace(p.stdout.String())
				prefix := fmt.Sprintf("rank %d of %d (%s) id ", r, world, l)
				require.True(t, strings.HasPrefix(line, prefix), "rank %d printed %q", r, line)
				ids[strings.TrimPrefix(line, prefix)] = true
			}
			require.Len(t, ids, 1, "every rank holds rank 0's id: %v", ids)
			for id := range ids {
				raw, err := hex.DecodeString(id)
				require.NoError(t, err)
				assert.Len(t, raw, len(core.CommID{}))
				assert.True(t, bytes.HasPrefix(raw, []byte("vyrecuda-sim-comm")), "a simulated device's id: %x", raw)
			}
		})
	}
}

// TestProcessRankZeroAlone: rank 0 of a job whose other rank never starts
// exits at its deadline, saying which rank did not come.
func TestProcessRankZeroAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := startRank(t, ctx, launcherEnv(OpenMPI, 0, 2, freePort(t)), 300*time.Millisecond)
	err := p.cmd.Wait()
	require.Error(t, err)
	assert.Contains(t, p.stderr.String(), "ranks [1] never fetched the communicator id")
	assert.Contains(t, p.stderr.String(), "Fix: ")
	assert.Empty(t, p.stdout.String())
}
