package cluster

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/cuda"
)

// Seams for tests without a GPU.
var (
	countDevices = cuda.Count
	openCUDA     = core.OpenCUDA
)

// Device returns the CUDA ordinal this rank uses when it sees visible
// devices: LocalRank, so the ranks on a host take one device each; or 0
// when the process sees a single device (a launcher that gives each rank
// its own GPU, e.g. srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per
// rank). More ranks on a host than devices is an error.
func (e Env) Device(visible int) (int, error) {
	const op = "cluster.Env.Device"
	switch {
	case visible < 1:
		return 0, envError(op, fmt.Sprintf("%d visible CUDA devices", visible), "run the rank where it sees a GPU (nvidia-smi, CUDA_VISIBLE_DEVICES)")
	case e.LocalRank < 0:
		return 0, envError(op, fmt.Sprintf("local rank %d", e.LocalRank), "give a LocalRank of 0 or more")
	case e.LocalRank < visible:
		return e.LocalRank, nil
	case visible == 1:
		return 0, nil
	}
	return 0, envError(op, fmt.Sprintf("local rank %d, but this process sees %d CUDA devices", e.LocalRank, visible),
		"start at most one rank per visible GPU on each host (torchrun --nproc-per-node, srun --ntasks-per-node, mpirun -npernode)")
}

// Open reads this rank's place from its launcher's variables (FromEnv) and
// opens a Backend on the CUDA device it uses (Env.Device), with opts. Join
// the job with Env.Join on the returned Env, or cluster.Join.
func Open(opts ...core.Option) (*core.Backend, Env, error) {
	const op = "cluster.Open"
	e, err := FromEnv()
	if err != nil {
		return nil, Env{}, withOp(op, err)
	}
	n, err := countDevices()
	if err != nil {
		return nil, Env{}, withOp(op, err)
	}
	ord, err := e.Device(n)
	if err != nil {
		return nil, Env{}, withOp(op, err)
	}
	b, err := openCUDA(ord, opts...)
	if err != nil {
		return nil, Env{}, withOp(op, err)
	}
	return b, e, nil
}
