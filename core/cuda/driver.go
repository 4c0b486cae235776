// Package cuda is the real driver.Driver: raw device operations over the
// CUDA driver API (package cudaapi, libcuda loaded at run time) and NCCL
// (package ncclapi). New opens one device, retaining its primary context;
// Devices lists the visible devices without opening any.
//
// The package keeps the Driver contract and nothing more: every call
// checks its arguments, runs on an OS thread with the context current, and
// reports failures whose cudaapi.Result errors.As finds. Asynchronous
// copies accept only page-locked memory that an open driver of this
// package allocated or registered. Budgets, pools, fusion and policy live
// in package core, whose OpenCUDA opens a Backend over this driver.
package cuda

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"runtime"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Driver is the driver.Driver of one CUDA device. It implements the
// optional interfaces of package driver that a real device offers (graphs,
// peers, collectives, batched launches, capabilities, pageable copies) and
// io.Closer. CUDA binds a context to an OS thread, and goroutines move
// between threads, so every call locks the goroutine to its thread and
// makes the primary context current there before it reaches the driver
// (see bound). A Driver is safe for concurrent use.
type Driver struct {
	dev  cudaapi.Device
	ctx  cudaapi.Context
	info driver.DeviceInfo
	caps driver.Capabilities // found at open; never changes
	log  *slog.Logger

	// life guards closed and the context: every call holds it shared while
	// it uses the context, so Close (exclusive) never releases the context
	// under a running call.
	life   sync.RWMutex
	closed bool

	// hostMu guards host, the page-locked host ranges this driver handed
	// out or registered. Asynchronous copies are checked against it so no
	// Go-managed (movable, collectable) memory ever reaches a copy that
	// outlives the call.
	hostMu sync.RWMutex
	host   hostRanges

	// launchBufs holds C parameter buffers for reuse by Launch and
	// LaunchBatch; Close frees them.
	launchBufs launchBuffers

	// marks are the completion marks StreamSynchronize polls (marks.go);
	// nil when the driver could not give their page. Close frees them.
	marks *marks
}

// The interfaces of package driver a Driver implements.
var (
	_ driver.Driver                = (*Driver)(nil)
	_ driver.GraphDriver           = (*Driver)(nil)
	_ driver.GraphUploader         = (*Driver)(nil)
	_ driver.PeerDriver            = (*Driver)(nil)
	_ driver.PeerAttributeReporter = (*Driver)(nil)
	_ driver.InlineCopier          = (*Driver)(nil)
	_ driver.CollectiveDriver      = (*Driver)(nil)
	_ driver.BatchLauncher         = (*Driver)(nil)
	_ driver.CapabilityReporter    = (*Driver)(nil)
	_ driver.PageableCopier        = (*Driver)(nil)
)

// Option configures New.
type Option func(*config)

type config struct {
	log *slog.Logger
}

// WithLogger sets where the driver reports what it cleans up after its
// user (pinned memory left at Close) and failures that have no caller to
// return to; nil keeps the default, slog.Default() at the time of New.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// New opens the CUDA device with the given ordinal, retaining its primary
// context until Close. Without an NVIDIA driver it returns an error
// matching cudaapi.ErrDriverNotFound (Kind KindUnsupported); an ordinal
// outside the visible devices is KindInvalidArgument.
func New(ordinal int, opts ...Option) (*Driver, error) {
	cfg := config{log: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return open("cuda.New", ordinal, cfg.log)
}

// Count loads and initializes the CUDA driver and returns the number of
// visible devices. It creates no context.
func Count() (int, error) { return initDriver("cuda.Count") }

// initDriver loads libcuda and initializes it; cuInit is idempotent, so it
// runs on every open.
func initDriver(op string) (int, error) {
	if err := cudaapi.Init(0); err != nil {
		return 0, openError(op, "cuInit", err)
	}
	n, err := cudaapi.DeviceGetCount()
	if err != nil {
		return 0, openError(op, "cuDeviceGetCount", err)
	}
	return int(n), nil
}

func open(op string, ordinal int, log *slog.Logger) (*Driver, error) {
	count, err := initDriver(op)
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= count || ordinal > math.MaxInt32 {
		return nil, errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("device ordinal %d, but %d device(s) are visible", ordinal, count),
			"pass an ordinal from 0 to the device count minus 1 (see core.Devices)")
	}
	sum, err := describe(op, ordinal)
	if err != nil {
		return nil, err
	}
	dev, err := cudaapi.DeviceGet(int32(ordinal))
	if err != nil {
		return nil, openError(op, "cuDeviceGet", err)
	}
	ctx, err := cudaapi.DevicePrimaryCtxRetain(dev)
	if err != nil {
		return nil, openError(op, "cuDevicePrimaryCtxRetain", err)
	}
	if ctx == 0 {
		// The retain counted even though no handle came back; undo it.
		if rerr := cudaapi.DevicePrimaryCtxRelease(dev); rerr != nil {
			log.Error("releasing a null primary context failed", "ordinal", ordinal, "err", rerr)
		}
		return nil, errs.NullSuccess(op, "cuDevicePrimaryCtxRetain")
	}
	d := &Driver{dev: dev, ctx: ctx, log: log, caps: sum.Capabilities, info: driver.DeviceInfo{
		Ordinal: ordinal, Name: sum.Name, TotalMemory: sum.TotalMemory,
		CCMajor: sum.CCMajor, CCMinor: sum.CCMinor,
		FeatureKey: featureKey(sum.CCMajor, sum.CCMinor, sum.DriverVersion),
	}}
	// Prove the context can be made current before handing it out.
	if err := d.begin(); err != nil {
		d.releaseContext()
		return nil, openError(op, "cuCtxSetCurrent", err)
	}
	d.marks = openMarks(log)
	d.end()
	trackDriver(d) // peers may use its pinned memory (peer.go)
	return d, nil
}

// featureKey hashes what compiled code and cached uploads depend on: the
// architecture and the driver that JIT-compiles for it.
func featureKey(ccMajor, ccMinor, driverVersion int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "vyrecuda/feature/v1 sm_%d%d driver %d", ccMajor, ccMinor, driverVersion)
	return h.Sum64()
}

func (d *Driver) releaseContext() {
	if err := cudaapi.DevicePrimaryCtxRelease(d.dev); err != nil {
		d.log.Error("releasing the primary context failed", "ordinal", d.info.Ordinal, "err", err)
	}
}

// begin pins the calling goroutine to its OS thread and makes the primary
// context current there; end undoes the pinning. Setting it unconditionally
// measured cheaper on an H200 than asking cuCtxGetCurrent first (361 vs 458
// ns for a whole adapter call, and the query allocates): about 75 ns of
// cuCtxSetCurrent per call, against about 2.6 us for a 4 KiB async copy. Between them the goroutine
// cannot migrate, so the driver call sees the right context whichever thread
// the scheduler picked. On failure nothing is held.
func (d *Driver) begin() error {
	if d == nil {
		return nilDriver()
	}
	d.life.RLock()
	if d.closed {
		d.life.RUnlock()
		return &errs.Error{Op: "cuda", Kind: errs.KindClosed, Code: cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED,
			Detail: "the CUDA driver was closed", Err: cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED,
			Fix: "open a new Backend with core.OpenCUDA"}
	}
	if err := d.bind(); err != nil {
		d.life.RUnlock()
		return err
	}
	return nil
}

// bind pins the calling goroutine to its OS thread and makes the context
// current there; the caller holds life shared and undoes the pinning with
// runtime.UnlockOSThread. On failure nothing is pinned.
func (d *Driver) bind() error {
	runtime.LockOSThread()
	if err := cudaapi.CtxSetCurrent(d.ctx); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cuCtxSetCurrent: %w", err)
	}
	return nil
}

func (d *Driver) end() {
	runtime.UnlockOSThread()
	d.life.RUnlock()
}

// bound runs f between begin and end: on a pinned thread with the context
// current, with Close held off. It is the one way a call reaches the
// driver (besides Close, and the wait of marks.go). A failure to make the
// context current is returned as it is, and f does not run.
func (d *Driver) bound(f func() error) error {
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	return f()
}

// do runs one driver call f bound to the context and names call in its
// failure, keeping the cudaapi.Result reachable through errors.As.
func (d *Driver) do(call string, f func() error) error {
	return d.bound(func() error { return callError(call, f()) })
}

// get is do for a driver call that returns a handle or pointer (see
// checked).
func get[T comparable](d *Driver, call string, f func() (T, error)) (T, error) {
	var v T
	err := d.bound(func() error {
		var err error
		v, err = checked(call, f)
		return err
	})
	return v, err
}

// checked runs a driver call f that returns a handle or pointer, with the
// context already bound: it names call in a failure, refuses a zero result
// returned with success as a null result, and returns the zero value with
// every error.
func checked[T comparable](call string, f func() (T, error)) (T, error) {
	var zero T
	v, err := f()
	if err == nil && v == zero {
		err = nullResult(call)
	}
	if err != nil {
		return zero, callError(call, err)
	}
	return v, nil
}

// query runs a stream or event query bound to the context: done when it
// succeeded, not done when the driver answered CUDA_ERROR_NOT_READY.
func (d *Driver) query(call string, f func() error) (bool, error) {
	var done bool
	err := d.bound(func() error {
		var err error
		done, err = queryResult(call, f())
		return err
	})
	return done, err
}

// Close releases the primary context. Page-locked memory still allocated or
// registered through this driver is freed first (and logged, since its owner
// should have done it). Calls after Close fail with KindClosed.
func (d *Driver) Close() error {
	if d == nil {
		return nilDriver()
	}
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed {
		return errs.New("cuda.Close", errs.KindClosed, "the CUDA driver was already closed", "close it once")
	}
	d.closed = true
	untrackDriver(d)
	d.launchBufs.freeAll() // no launch holds one: each runs under life shared
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if err := cudaapi.CtxSetCurrent(d.ctx); err != nil {
		keep(callError("cuCtxSetCurrent", err))
	} else {
		d.freeHostLeft(keep)
	}
	keep(callError("cuDevicePrimaryCtxRelease", cudaapi.DevicePrimaryCtxRelease(d.dev)))
	return first
}

// freeHostLeft frees, at Close with the context current, the completion
// marks and every page-locked range still tracked, logging each range; it
// hands each failure to keep.
func (d *Driver) freeHostLeft(keep func(error)) {
	d.hostMu.Lock()
	left := d.host
	d.host = nil
	d.hostMu.Unlock()
	keep(callError("cuMemFreeHost", d.marks.close()))
	for _, r := range left {
		d.log.Warn("freeing page-locked host memory left at Close", "ordinal", d.info.Ordinal,
			"addr", fmt.Sprintf("%#x", r.start), "bytes", r.end-r.start, "registered", r.registered)
		if r.registered {
			keep(callError("cuMemHostUnregister", cudaapi.MemHostUnregister(r.p)))
		} else {
			keep(callError("cuMemFreeHost", cudaapi.MemFreeHost(r.p)))
		}
	}
}

// Info reports the device, as described when the driver was opened.
func (d *Driver) Info() (driver.DeviceInfo, error) {
	if err := d.bound(func() error { return nil }); err != nil {
		return driver.DeviceInfo{}, err
	}
	return d.info, nil
}

// MemGetInfo reports live free and total device memory.
func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	err = d.do("cuMemGetInfo", func() error {
		var err error
		free, total, err = cudaapi.MemGetInfo()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return free, total, nil
}
