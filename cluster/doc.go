// Package cluster starts a job of several processes, one device each, on
// one host or many, the way PyTorch users launch one: with torchrun, srun
// (Slurm) or mpirun (Open MPI). FromEnv reads each rank's place from the
// variables its launcher set, Open opens the rank's device (its local rank
// among the ranks on its host), and Join joins every rank to one
// communicator (a *core.Comm) for collectives across the job:
//
//	b, env, err := cluster.Open()
//	...
//	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
//	comm, err := env.Join(ctx, b)
//	...
//	err = comm.AllReduce(grads, grads, core.DataFloat32, core.ReduceSum)
//
// Rank 0 creates the communicator id and serves it over TCP at MASTER_ADDR
// and MASTER_PORT; the other ranks fetch it, retrying until the context's
// deadline, then all join. docs/MULTI-GPU.md shows each launcher's command
// line and the variables Slurm and mpirun jobs must set.
package cluster
