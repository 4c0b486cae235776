package core

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Bounds on the C launch buffers a cudaDriver keeps for reuse: a few for
// concurrent callers, and none so large that one huge Batch pins its memory
// until Close.
const (
	maxIdleLaunchBuffers  = 4
	maxKeptLaunchBufBytes = 1 << 20
)

// launchBuffers is a cudaDriver's pool of C launch buffers, so launching
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
func checkLaunch(call string, f Function, cfg LaunchConfig, args int) error {
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
// into C (see BatchLauncher). Every launch is checked before any is queued.
func (d *cudaDriver) LaunchBatch(s Stream, ls []Launch) (int, error) {
	const call = "cuLaunchKernel"
	if s == 0 {
		return 0, nullStream(call)
	}
	values := 0
	for i := range ls {
		if err := checkLaunch(call, ls[i].F, ls[i].Cfg, len(ls[i].Args)); err != nil {
			var e *Error
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
	if err := d.begin(); err != nil {
		return 0, err
	}
	lb := d.launchBufs.take()
	n, err := queueLaunches(lb, s, ls, values)
	d.launchBufs.put(lb)
	d.end()
	if err == nil {
		return n, nil
	}
	var r cudaapi.Result
	if !errors.As(err, &r) || errors.Is(err, cudaapi.ErrDriverNotFound) {
		return n, callError(call, err)
	}
	return n, &Error{Op: call, Kind: KindDriver, Code: r, Err: r,
		Detail: fmt.Sprintf("launch %d of %d failed; the %d before it were queued and none after it", n, len(ls), n),
		Fix:    "check the kernel's parameters and launch geometry; drain the stream before reusing what the launches use"}
}

// queueLaunches fills lb with ls and queues them; the context must be
// current. Before the C loop runs nothing is queued, so its own failures
// report index 0.
func queueLaunches(lb *cudaapi.LaunchBatch, s Stream, ls []Launch, values int) (int, error) {
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
