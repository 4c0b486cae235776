package core

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Launch is one kernel launch of a batch handed to a BatchLauncher.
type Launch struct {
	F    Function
	Cfg  LaunchConfig
	Args []KernelArg
	// Programmatic asks for programmatic dependent launch: the kernel may
	// be scheduled before the launch ahead of it on the stream has finished
	// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), because it
	// waits on its grid dependencies before touching memory. A driver that
	// cannot launch so queues it as an ordinary launch, which computes the
	// same. The Backend sets it only on a launch that directly follows
	// another launch of the same batch.
	Programmatic bool
}

// BatchLauncher is an optional Driver capability, found by type assertion: a
// driver that queues many launches on one stream in one call, so a Batch of
// tiny steps does not pay the per-call overhead of Launch for each. The real
// driver makes one context switch and one crossing into C for the whole list.
type BatchLauncher interface {
	// LaunchBatch queues ls in order on s, as Launch would one by one. It
	// returns len(ls) and nil when all were queued. On failure it returns the
	// index of the launch that failed and an error carrying its
	// cudaapi.Result: nothing after that launch was queued, launches before
	// it may have been, so the caller drains s before reusing what they use.
	LaunchBatch(s Stream, ls []Launch) (int, error)
}

// launchPlans queues the Batch's steps on s: through the driver's
// BatchLauncher when it has one, else one Launch per step. It returns the
// index of the step that failed with the driver's error, or len(plans).
func (b *Backend) launchPlans(s Stream, plans []launchPlan) (int, error) {
	if bl, ok := b.drv.(BatchLauncher); ok && len(plans) > 1 {
		ls := make([]Launch, len(plans))
		for i := range plans {
			ls[i] = Launch{F: plans[i].fn, Cfg: plans[i].cfg, Args: plans[i].args}
		}
		markProgrammatic(ls, plans)
		n, err := bl.LaunchBatch(s, ls)
		if err == nil {
			return len(plans), nil
		}
		if n < 0 || n >= len(plans) {
			n = 0 // a driver breaking the contract still gets its error reported
		}
		return n, err
	}
	for i := range plans {
		if err := b.drv.Launch(plans[i].fn, plans[i].cfg, s, plans[i].args); err != nil {
			return i, err
		}
	}
	return len(plans), nil
}

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
			slots[k] = a.slot()
		}
	}
	return lb.Launch()
}
