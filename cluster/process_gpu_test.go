//go:build gpu

package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/cuda"
)

// TestGPUProcessesJoinAndAllReduce starts one process per visible GPU, each
// with the variables torchrun would set by hand (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT): each opens its local rank's GPU,
// joins one NCCL communicator across the processes and all-reduces 4 MiB
// of float32, checked on the host. One GPU is a job of one rank.
func TestGPUProcessesJoinAndAllReduce(t *testing.T) {
	n, err := cuda.Count()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := freePort(t)
	procs := make([]*rankProcess, n)
	for r := range procs {
		v := vars{"RANK": strconv.Itoa(r), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_RANK": strconv.Itoa(r),
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port), cudaVar: "1"}
		procs[r] = startRank(t, ctx, v, 2*time.Minute)
	}
	for r, p := range procs {
		require.NoError(t, p.cmd.Wait(), "rank %d: %s", r, p.stderr.String())
		want := fmt.Sprintf("rank %d of %d on GPU %d: all-reduce ok", r, n, r)
		require.Equal(t, want, strings.TrimSpace(p.stdout.String()), "rank %d: %s", r, p.stderr.String())
	}
}
