package cuda

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// ModuleLoad loads a PTX or cubin image (copied into C memory for the call).
func (d *Driver) ModuleLoad(image []byte) (driver.Module, error) {
	if len(image) == 0 {
		return 0, refused("cuModuleLoadData", "empty image", "pass PTX text or a cubin")
	}
	m, err := get(d, "cuModuleLoadData", func() (cudaapi.Module, error) { return cudaapi.ModuleLoadImage(image) })
	return driver.Module(m), err
}

// ModuleUnload unloads a module.
func (d *Driver) ModuleUnload(m driver.Module) error {
	if m == 0 {
		return refused("cuModuleUnload", "null module", "pass a module from ModuleLoad")
	}
	return d.do("cuModuleUnload", func() error { return cudaapi.ModuleUnload(cudaapi.Module(m)) })
}

// ModuleFunction looks up a kernel entry point in m.
func (d *Driver) ModuleFunction(m driver.Module, name string) (driver.Function, error) {
	if m == 0 || name == "" {
		return 0, refused("cuModuleGetFunction", fmt.Sprintf("module %#x, name %q", uintptr(m), name), "pass a loaded module and a kernel name")
	}
	f, err := get(d, "cuModuleGetFunction", func() (cudaapi.Function, error) {
		return cudaapi.ModuleGetFunction(cudaapi.Module(m), name)
	})
	return driver.Function(f), err
}

// Launch queues a kernel launch on s. The parameters are packed into a
// pooled C buffer (the driver copies them when the launch is queued), so a
// warm driver allocates nothing per launch.
func (d *Driver) Launch(f driver.Function, cfg driver.LaunchConfig, s driver.Stream, args []driver.KernelArg) error {
	const call = "cuLaunchKernel"
	if err := checkLaunch(call, f, cfg, len(args)); err != nil {
		return err
	}
	if s == 0 {
		return nullStream(call)
	}
	return d.do(call, func() error {
		lb := d.launchBufs.take()
		one := [1]driver.Launch{{F: f, Cfg: cfg, Args: args}}
		_, err := queueLaunches(lb, s, one[:], len(args))
		d.launchBufs.put(lb)
		return err
	})
}

// Bounds on the C launch buffers a Driver keeps for reuse: a few for
// concurrent callers, and none so large that one huge Batch pins its memory
// until Close.
const (
	maxIdleLaunchBuffers  = 4
	maxKeptLaunchBufBytes = 1 << 20
)

// launchBuffers is a Driver's pool of C launch buffers, so launching
// allocates no C memory once warm. Buffers are taken and given back while
// the driver's life lock is held shared, so Close (exclusive) frees only
// idle ones.
type launchBuffers struct {
	mu   sync.Mutex
	idle []*cudaapi.LaunchBatch
}

func (p *launchBuffers) take() *cudaapi.LaunchBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.idle); n > 0 {
		lb := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return lb
	}
	return new(cudaapi.LaunchBatch)
}

func (p *launchBuffers) put(lb *cudaapi.LaunchBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= maxIdleLaunchBuffers || lb.Bytes() > maxKeptLaunchBufBytes {
		lb.Free()
		return
	}
	p.idle = append(p.idle, lb)
}

// freeAll releases every idle buffer (at Close).
func (p *launchBuffers) freeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lb := range p.idle {
		lb.Free()
	}
	p.idle = nil
}

// checkLaunch refuses a launch the driver would reject, before anything is
// queued.
func checkLaunch(call string, f driver.Function, cfg driver.LaunchConfig, args int) error {
	if f == 0 {
		return refused(call, "null function", "pass a function from ModuleFunction")
	}
	for i := range 3 {
		if cfg.Grid[i] == 0 || cfg.Block[i] == 0 {
			return refused(call, fmt.Sprintf("grid %v, block %v", cfg.Grid, cfg.Block), "use at least 1 in every grid and block dimension")
		}
	}
	if args > cudaapi.MaxKernelParams {
		return refused(call, fmt.Sprintf("%d kernel parameters, more than %d", args, cudaapi.MaxKernelParams), "pass the kernel's parameters only")
	}
	return nil
}

// LaunchBatch queues ls in order on s with one context switch and one call
// into C (see driver.BatchLauncher). Every launch is checked before any is
// queued.
func (d *Driver) LaunchBatch(s driver.Stream, ls []driver.Launch) (int, error) {
	const call = "cuLaunchKernel"
	if s == 0 {
		return 0, nullStream(call)
	}
	values := 0
	for i := range ls {
		if err := checkLaunch(call, ls[i].F, ls[i].Cfg, len(ls[i].Args)); err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				e.Detail = fmt.Sprintf("launch %d of %d: %s", i, len(ls), e.Detail)
			}
			return i, err
		}
		values += len(ls[i].Args)
	}
	if len(ls) == 0 {
		return 0, nil
	}
	var n int
	err := d.bound(func() error {
		lb := d.launchBufs.take()
		var err error
		n, err = queueLaunches(lb, s, ls, values)
		d.launchBufs.put(lb)
		return batchError(call, n, len(ls), err)
	})
	return n, err
}

// batchError reports the failure of launch n of a batch of total: with
// its Result, saying what was queued, or named by call when the driver
// gave none. A nil err stays nil.
func batchError(call string, n, total int, err error) error {
	if err == nil {
		return nil
	}
	var r cudaapi.Result
	if !errors.As(err, &r) || errors.Is(err, cudaapi.ErrDriverNotFound) {
		return callError(call, err)
	}
	return &errs.Error{Op: call, Kind: errs.KindDriver, Code: r, Err: r,
		Detail: fmt.Sprintf("launch %d of %d failed; the %d before it were queued and none after it", n, total, n),
		Fix:    "check the kernel's parameters and launch geometry; drain the stream before reusing what the launches use"}
}

// queueLaunches fills lb with ls and queues them; the context must be
// current. Before the C loop runs nothing is queued, so its own failures
// report index 0.
func queueLaunches(lb *cudaapi.LaunchBatch, s driver.Stream, ls []driver.Launch, values int) (int, error) {
	if err := lb.Reset(len(ls), values); err != nil {
		return 0, err
	}
	for i := range ls {
		l := &ls[i]
		add := lb.Add
		if l.Programmatic {
			add = lb.AddProgrammatic
		}
		slots, err := add(cudaapi.Function(l.F), l.Cfg.Grid, l.Cfg.Block, l.Cfg.SharedMem, cudaapi.Stream(s), len(l.Args))
		if err != nil {
			return 0, err
		}
		for k, a := range l.Args {
			slots[k] = a.Slot()
		}
	}
	return lb.Launch()
}
