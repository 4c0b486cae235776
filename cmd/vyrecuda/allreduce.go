package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/vyre-go/vyrecuda/cluster"
	"github.com/vyre-go/vyrecuda/core"
)

// allreduceConfig is what the allreduce command's flags set.
type allreduceConfig struct {
	device  string
	size    int
	iters   int
	timeout time.Duration
}

// runAllreduce is one rank of a job that a launcher started (torchrun,
// srun, mpirun): it joins the job's communicator (cluster.Join), all-reduces
// a float32 buffer and checks every element on the host, then times
// -iters more all-reduces.
func runAllreduce(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	dev := deviceFlag(deviceAuto)
	fs.Var(&dev, "device", "where to run: auto (GPU when present, else simulated), sim or cuda")
	size := sizeFlag(64 << 20)
	fs.Var(&size, "size", "bytes to all-reduce (float32 elements)")
	iters := fs.Int("iters", 5, "timed all-reduces after the checked one")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long the ranks may take to find each other")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: vyrecuda allreduce [-device auto|sim|cuda] [-size 64MiB] [-iters 5] [-timeout 2m]\n\n"+
			"One rank of a job started by torchrun, srun or mpirun (see docs/MULTI-GPU.md):\n"+
			"joins the job's communicator, all-reduces a float32 buffer checked on the host,\n"+
			"then times -iters more. Each rank uses the GPU of its local rank.\n"+
			"  torchrun --no-python --nproc-per-node=2 ./vyrecuda allreduce\n")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if *iters < 0 || *timeout <= 0 || size%4 != 0 {
		fmt.Fprintf(stderr, "vyrecuda allreduce: -iters %d, -timeout %v, -size %d: want -iters >= 0, a positive -timeout and a -size of whole float32s\n", *iters, *timeout, size)
		return exitUsage
	}
	cfg := allreduceConfig{device: string(dev), size: int(size), iters: *iters, timeout: *timeout}
	if err := allreduce(cfg, stdout); err != nil {
		return fail(stderr, "allreduce", err)
	}
	return exitOK
}

func allreduce(cfg allreduceConfig, stdout io.Writer) (err error) {
	env, err := cluster.FromEnv()
	if err != nil {
		return err
	}
	s, err := openRank(cfg.device, env)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	c, err := env.Join(ctx, s.Backend)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	times, err := allreduceRuns(s.Backend, c, cfg.size/4, cfg.iters)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("GPU %d", s.Info.Ordinal)
	if s.Kind == deviceSim {
		where = "simulated device"
	}
	line := fmt.Sprintf("rank %d of %d (%s, %s): all-reduce of %s float32 checked on the host: ok",
		env.Rank, env.WorldSize, env.Launcher, where, formatBytes(uint64(cfg.size)))
	if len(times) > 0 {
		slices.Sort(times)
		med := times[len(times)/2]
		busBW := float64(cfg.size) * 2 * float64(env.WorldSize-1) / float64(env.WorldSize) / med.Seconds() / 1e9
		line += fmt.Sprintf("; %d timed: median %s, bus bandwidth %.1f GB/s", len(times), formatDuration(med), busBW)
	}
	fmt.Fprintln(stdout, line)
	return nil
}

// openRank opens the device this rank uses: GPU env.Device of the visible
// ones, or a simulated device, which joins no other process.
func openRank(choice string, env cluster.Env) (*session, error) {
	reason := ""
	if choice == deviceAuto {
		c, err := chooseDevice()
		if err != nil {
			return nil, err
		}
		choice, reason = deviceCUDA, c.Reason
		if c.Sim {
			choice = deviceSim
		}
	}
	if choice == deviceSim {
		if env.WorldSize > 1 {
			msg := fmt.Sprintf("rank %d of %d: the simulated device joins no other process; run the ranks on GPUs (-device cuda)", env.Rank, env.WorldSize)
			if reason != "" {
				msg += "; -device auto chose it: " + reason
			}
			return nil, errors.New(msg)
		}
		return openSimSession(0, reason, nil)
	}
	devs, err := listDevices()
	if err != nil {
		return nil, err
	}
	ord, err := env.Device(len(devs))
	if err != nil {
		return nil, err
	}
	return openCUDASession(ord, reason, nil)
}

// allreduceRuns all-reduces n float32 elements from a send buffer into a
// recv buffer (rank r sends (r+1)*(i%5+1) at element i: small integers, so
// the sum is exact in any order), checks every element on the host, then
// times iters more all-reduces and checks again.
func allreduceRuns(b *core.Backend, c *core.Comm, n, iters int) (times []time.Duration, err error) {
	r, world := c.Rank(), c.Size()
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32((r+1)*(i%5+1))))
	}
	send, err := b.Alloc(len(data))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.Free(send)) }()
	recv, err := b.Alloc(len(data))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.Free(recv)) }()
	if err := b.Upload(core.UploadAt{Buf: send, Data: data}); err != nil {
		return nil, err
	}
	if err := c.AllReduce(send, recv, core.DataFloat32, core.ReduceSum); err != nil {
		return nil, err
	}
	if err := checkSums(b, recv, world, data); err != nil {
		return nil, err
	}
	for k := 0; k < iters; k++ {
		start := time.Now()
		if err := c.AllReduce(send, recv, core.DataFloat32, core.ReduceSum); err != nil {
			return nil, err
		}
		times = append(times, time.Since(start))
	}
	if iters > 0 {
		return times, checkSums(b, recv, world, data)
	}
	return times, nil
}

// checkSums reads recv into buf and checks element i against
// world*(world+1)/2*(i%5+1).
func checkSums(b *core.Backend, recv core.Buffer, world int, buf []byte) error {
	out, err := b.Download(recv.All(), buf)
	if err != nil {
		return err
	}
	for i := 0; i < len(out)/4; i++ {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		if want := float32(world * (world + 1) / 2 * (i%5 + 1)); got != want {
			return fmt.Errorf("element %d of the all-reduce is %v, want %v", i, got, want)
		}
	}
	return nil
}
