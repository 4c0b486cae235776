package core

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// OpenCUDA opens a Backend on the CUDA device with the given ordinal, through
// the driver API (libcuda, loaded at run time). The Backend retains the
// device's primary context and releases it when it is closed. Without an
// NVIDIA driver it returns an error matching cudaapi.ErrDriverNotFound.
func OpenCUDA(ordinal int, opts ...Option) (*Backend, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	drv, err := newCUDADriver("OpenCUDA", ordinal, cfg.log)
	if err != nil {
		return nil, err
	}
	b, err := Open(drv, opts...)
	if err != nil {
		if cerr := drv.Close(); cerr != nil {
			cfg.log.Error("releasing the CUDA context after a failed Open failed", "err", cerr)
		}
		return nil, err
	}
	return b, nil
}

// NewCUDADriver returns the real Driver for the CUDA device with the given
// ordinal, holding a retained primary context. Most callers want OpenCUDA;
// this exists for building a Backend (or a conformance run) over the raw
// driver. The returned Driver also implements io.Closer: Close releases the
// context, and a Backend built over it with Open closes it in its own Close.
func NewCUDADriver(ordinal int) (Driver, error) {
	d, err := newCUDADriver("NewCUDADriver", ordinal, slog.Default())
	if err != nil {
		return nil, err
	}
	return d, nil
}

// cudaDriver is the Driver over cudaapi. CUDA binds a context to an OS
// thread, and goroutines move between threads, so every call locks the
// goroutine to its thread and makes the primary context current there before
// it reaches the driver (see begin).
type cudaDriver struct {
	dev  cudaapi.Device
	ctx  cudaapi.Context
	info DeviceInfo
	caps Capabilities // found at open; never changes
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

	// marks are the completion marks StreamSynchronize polls (cuda_marks.go);
	// nil when the driver could not give their page. Close frees them.
	marks *marks
}

// Sentinel-like results for the adapter's own refusals; errors.As finds the
// cudaapi.Result in each, as the Driver contract requires.
const (
	resultRefused = cudaapi.CUDA_ERROR_INVALID_VALUE
	resultNull    = cudaapi.CUDA_ERROR_INVALID_HANDLE
)

// openError classifies a failure while opening the driver: no library is
// KindUnsupported with the loader's error, a CUDA result is KindDriver.
func openError(op, call string, err error) *Error {
	if errors.Is(err, cudaapi.ErrDriverNotFound) {
		// The loader's message ends with its own "Fix:" sentence; fold it into
		// this error's one Fix instead of printing two.
		fix, cause := splitFix(err)
		if fix == "" {
			// Without cgo every binding returns the bare sentinel.
			fix = "build with cgo (CGO_ENABLED=1, gcc) and install the NVIDIA driver; VYRECUDA_LIBCUDA selects the library path"
		}
		fix += "; "
		return &Error{Op: op, Kind: KindUnsupported, Detail: "the CUDA driver library could not be loaded", Err: cause,
			Fix: fix + "to run without a GPU, use the simulated device (core/sim) instead"}
	}
	e := &Error{Op: op, Kind: KindDriver, Detail: call + " failed", Err: err,
		Fix: "check that an NVIDIA GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and that the driver is working"}
	var r cudaapi.Result
	if errors.As(err, &r) {
		e.Code = r
		if r == cudaapi.CUDA_ERROR_NO_DEVICE {
			e.Detail = "no CUDA device is visible"
			e.Fix = "check nvidia-smi and CUDA_VISIBLE_DEVICES; use core/sim to run without a GPU"
		}
	}
	return e
}

// fixlessError carries an error's text without its trailing "Fix:" sentence
// and still unwraps to it, so errors.Is keeps working.
type fixlessError struct {
	msg string
	err error
}

func (e *fixlessError) Error() string { return e.msg }
func (e *fixlessError) Unwrap() error { return e.err }

// splitFix separates a "...; Fix: sentence" error message into the cause
// (as an error wrapping err) and the sentence.
func splitFix(err error) (string, error) {
	msg := err.Error()
	i := strings.Index(msg, "; Fix: ")
	if i < 0 {
		return "", err
	}
	return msg[i+len("; Fix: "):], &fixlessError{msg: msg[:i], err: err}
}

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

func newCUDADriver(op string, ordinal int, log *slog.Logger) (*cudaDriver, error) {
	count, err := initDriver(op)
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= count || ordinal > math.MaxInt32 {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("device ordinal %d, but %d device(s) are visible", ordinal, count),
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
		return nil, nullSuccess(op, "cuDevicePrimaryCtxRetain")
	}
	d := &cudaDriver{dev: dev, ctx: ctx, log: log, caps: sum.Capabilities, info: DeviceInfo{
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
	trackCUDADriver(d) // peers may use its pinned memory (cuda_peer.go)
	return d, nil
}

// featureKey hashes what compiled code and cached uploads depend on: the
// architecture and the driver that JIT-compiles for it.
func featureKey(ccMajor, ccMinor, driverVersion int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "vyrecuda/feature/v1 sm_%d%d driver %d", ccMajor, ccMinor, driverVersion)
	return h.Sum64()
}

func (d *cudaDriver) releaseContext() {
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
func (d *cudaDriver) begin() error {
	d.life.RLock()
	if d.closed {
		d.life.RUnlock()
		return &Error{Op: "cuda", Kind: KindClosed, Code: cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED,
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
func (d *cudaDriver) bind() error {
	runtime.LockOSThread()
	if err := cudaapi.CtxSetCurrent(d.ctx); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cuCtxSetCurrent: %w", err)
	}
	return nil
}

func (d *cudaDriver) end() {
	runtime.UnlockOSThread()
	d.life.RUnlock()
}

// callError names the driver entry point that failed, keeping its Result
// reachable through errors.As.
func callError(call string, err error) error { return fmt.Errorf("%s: %w", call, err) }

// refused reports a call the adapter rejects before reaching the driver.
func refused(call, detail, fix string) error {
	return &Error{Op: call, Kind: KindInvalidArgument, Code: resultRefused, Detail: detail, Fix: fix, Err: resultRefused}
}

// nullResult reports success with a null handle or pointer.
func nullResult(call string) error {
	return &Error{Op: call, Kind: KindDriver, Code: resultNull, Detail: "returned success with a null result",
		Fix: "the driver misbehaved; report it with the driver version, and retry the call", Err: resultNull}
}

func nullStream(call string) error {
	return refused(call, "the legacy null stream (0) was passed", "pass a stream from StreamCreate")
}

// Close releases the primary context. Page-locked memory still allocated or
// registered through this driver is freed first (and logged, since its owner
// should have done it). Calls after Close fail with KindClosed.
func (d *cudaDriver) Close() error {
	d.life.Lock()
	defer d.life.Unlock()
	if d.closed {
		return newError("cuda.Close", KindClosed, "the CUDA driver was already closed", "close it once")
	}
	d.closed = true
	untrackCUDADriver(d)
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
		d.hostMu.Lock()
		left := d.host
		d.host = nil
		d.hostMu.Unlock()
		if err := d.marks.close(); err != nil {
			keep(callError("cuMemFreeHost", err))
		}
		for _, r := range left {
			d.log.Warn("freeing page-locked host memory left at Close", "ordinal", d.info.Ordinal,
				"addr", fmt.Sprintf("%#x", r.start), "bytes", r.end-r.start, "registered", r.registered)
			if r.registered {
				if err := cudaapi.MemHostUnregister(r.p); err != nil {
					keep(callError("cuMemHostUnregister", err))
				}
			} else if err := cudaapi.MemFreeHost(r.p); err != nil {
				keep(callError("cuMemFreeHost", err))
			}
		}
	}
	if err := cudaapi.DevicePrimaryCtxRelease(d.dev); err != nil {
		keep(callError("cuDevicePrimaryCtxRelease", err))
	}
	return first
}

// Info reports the device, as described when the driver was opened.
func (d *cudaDriver) Info() (DeviceInfo, error) {
	if err := d.begin(); err != nil {
		return DeviceInfo{}, err
	}
	d.end()
	return d.info, nil
}

// MemGetInfo reports live free and total device memory.
func (d *cudaDriver) MemGetInfo() (free, total uint64, err error) {
	if err := d.begin(); err != nil {
		return 0, 0, err
	}
	free, total, err = cudaapi.MemGetInfo()
	d.end()
	if err != nil {
		return 0, 0, callError("cuMemGetInfo", err)
	}
	return free, total, nil
}

// MemAlloc allocates n > 0 bytes of device memory.
func (d *cudaDriver) MemAlloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, refused("cuMemAlloc", "requested 0 bytes", "request at least 1 byte")
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	p, err := cudaapi.MemAlloc(n)
	if err == nil && p == 0 {
		// Nothing to free: a null pointer owns no memory.
		err = nullResult("cuMemAlloc")
	}
	d.end()
	if err != nil {
		return 0, callError("cuMemAlloc", err)
	}
	return uint64(p), nil
}

// MemFree frees device memory from MemAlloc.
func (d *cudaDriver) MemFree(ptr uint64) error {
	if ptr == 0 {
		return refused("cuMemFree", "null device pointer", "pass a pointer from MemAlloc")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.MemFree(cudaapi.DevicePtr(ptr))
	d.end()
	if err != nil {
		return callError("cuMemFree", err)
	}
	return nil
}

// HostAlloc allocates n bytes of portable page-locked memory and returns a
// slice over it (C memory, never moved or collected by Go).
func (d *cudaDriver) HostAlloc(n uint64) ([]byte, error) {
	if n == 0 || n > math.MaxInt {
		return nil, refused("cuMemHostAlloc", fmt.Sprintf("requested %d bytes", n), "request between 1 byte and math.MaxInt bytes")
	}
	if err := d.begin(); err != nil {
		return nil, err
	}
	defer d.end()
	p, err := cudaapi.MemHostAlloc(n, cudaapi.CU_MEMHOSTALLOC_PORTABLE)
	if err != nil {
		return nil, callError("cuMemHostAlloc", err)
	}
	if p == nil {
		return nil, nullResult("cuMemHostAlloc")
	}
	d.hostMu.Lock()
	ok := d.host.insert(hostRange{start: uintptr(p), end: uintptr(p) + uintptr(n), p: p})
	d.hostMu.Unlock()
	if !ok {
		if ferr := cudaapi.MemFreeHost(p); ferr != nil {
			d.log.Error("freeing an overlapping pinned allocation failed", "err", ferr)
		}
		return nil, &Error{Op: "cuMemHostAlloc", Kind: KindDriver, Code: resultNull, Err: resultNull,
			Detail: fmt.Sprintf("returned %#x, inside page-locked memory already tracked", uintptr(p)),
			Fix:    "the driver misbehaved; report it with the driver version"}
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// HostFree frees memory from HostAlloc, given its first byte.
func (d *cudaDriver) HostFree(p unsafe.Pointer) error {
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	i, ok := d.host.find(uintptr(p))
	if p == nil || !ok || d.host[i].registered {
		return refused("cuMemFreeHost", fmt.Sprintf("%p does not start memory from HostAlloc", p),
			"pass the first byte of a HostAlloc slice, once")
	}
	// Held under hostMu so no copy check can see the range after the free.
	if err := cudaapi.MemFreeHost(p); err != nil {
		return callError("cuMemFreeHost", err)
	}
	d.host.removeAt(i)
	return nil
}

// HostRegister page-locks n bytes of caller memory starting at p.
func (d *cudaDriver) HostRegister(p unsafe.Pointer, n uint64) error {
	start := uintptr(p)
	if p == nil || n == 0 || n > uint64(^uintptr(0)-start) {
		return refused("cuMemHostRegister", fmt.Sprintf("range %p, %d bytes", p, n), "pass a non-nil pointer and a length that stays inside the address space")
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	r := hostRange{start: start, end: start + uintptr(n), p: p, registered: true}
	if d.host.overlaps(r) {
		return &Error{Op: "cuMemHostRegister", Kind: KindInvalidArgument, Code: cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
			Err: cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, Detail: fmt.Sprintf("[%p, +%d) overlaps page-locked memory", p, n),
			Fix: "register each range once"}
	}
	if err := cudaapi.MemHostRegister(p, n, cudaapi.CU_MEMHOSTREGISTER_PORTABLE); err != nil {
		return callError("cuMemHostRegister", err)
	}
	d.host.insert(r)
	return nil
}

// HostUnregister undoes HostRegister for the range starting at p.
func (d *cudaDriver) HostUnregister(p unsafe.Pointer) error {
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	i, ok := d.host.find(uintptr(p))
	if p == nil || !ok || !d.host[i].registered {
		return &Error{Op: "cuMemHostUnregister", Kind: KindInvalidArgument, Code: cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
			Err: cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, Detail: fmt.Sprintf("%p does not start a registered range", p),
			Fix: "pass the pointer given to HostRegister, once"}
	}
	if err := cudaapi.MemHostUnregister(p); err != nil {
		return callError("cuMemHostUnregister", err)
	}
	d.host.removeAt(i)
	return nil
}

// StreamCreate creates a non-blocking stream, so work on it never
// synchronizes with the legacy null stream.
func (d *cudaDriver) StreamCreate() (Stream, error) {
	if err := d.begin(); err != nil {
		return 0, err
	}
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	if err == nil && s == 0 {
		err = nullResult("cuStreamCreate")
	}
	d.end()
	if err != nil {
		return 0, callError("cuStreamCreate", err)
	}
	return Stream(s), nil
}

// StreamDestroy destroys a stream.
func (d *cudaDriver) StreamDestroy(s Stream) error {
	return d.onStream("cuStreamDestroy", s, cudaapi.StreamDestroy)
}

// StreamSynchronize waits for all work queued on s. It polls a completion
// mark queued behind that work where it can (cuda_marks.go), and otherwise
// blocks in cuStreamSynchronize.
func (d *cudaDriver) StreamSynchronize(s Stream) error {
	if m := d.marks; m != nil && s != 0 && !m.off.Load() {
		if handled, err := d.syncByMark(m, s); handled {
			return err
		}
	}
	return d.onStream("cuStreamSynchronize", s, cudaapi.StreamSynchronize)
}

func (d *cudaDriver) onStream(call string, s Stream, f func(cudaapi.Stream) error) error {
	if s == 0 {
		return nullStream(call)
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := f(cudaapi.Stream(s))
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}

// StreamQuery reports whether all work queued on s has completed.
func (d *cudaDriver) StreamQuery(s Stream) (bool, error) {
	if s == 0 {
		return false, nullStream("cuStreamQuery")
	}
	if err := d.begin(); err != nil {
		return false, err
	}
	err := cudaapi.StreamQuery(cudaapi.Stream(s))
	d.end()
	return queryResult("cuStreamQuery", err)
}

// queryResult maps a query's CUDA_ERROR_NOT_READY to "not done".
func queryResult(call string, err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	var r cudaapi.Result
	if errors.As(err, &r) && r == cudaapi.CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return false, callError(call, err)
}

// StreamWaitEvent makes future work on s wait for e.
func (d *cudaDriver) StreamWaitEvent(s Stream, e Event) error {
	if s == 0 {
		return nullStream("cuStreamWaitEvent")
	}
	if e == 0 {
		return refused("cuStreamWaitEvent", "null event", "pass an event from EventCreate")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.StreamWaitEvent(cudaapi.Stream(s), cudaapi.Event(e), 0)
	d.end()
	if err != nil {
		return callError("cuStreamWaitEvent", err)
	}
	return nil
}

// EventCreate creates an event; without timing it is created with
// CU_EVENT_DISABLE_TIMING, the cheaper kind to record and query.
func (d *cudaDriver) EventCreate(timing bool) (Event, error) {
	flags := uint32(cudaapi.CU_EVENT_DISABLE_TIMING)
	if timing {
		flags = cudaapi.CU_EVENT_DEFAULT
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	e, err := cudaapi.EventCreate(flags)
	if err == nil && e == 0 {
		err = nullResult("cuEventCreate")
	}
	d.end()
	if err != nil {
		return 0, callError("cuEventCreate", err)
	}
	return Event(e), nil
}

// EventRecord records e at the current end of s.
func (d *cudaDriver) EventRecord(e Event, s Stream) error {
	if e == 0 {
		return refused("cuEventRecord", "null event", "pass an event from EventCreate")
	}
	if s == 0 {
		return nullStream("cuEventRecord")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.EventRecord(cudaapi.Event(e), cudaapi.Stream(s))
	d.end()
	if err != nil {
		return callError("cuEventRecord", err)
	}
	return nil
}

// EventQuery reports whether the work before e has completed.
func (d *cudaDriver) EventQuery(e Event) (bool, error) {
	if e == 0 {
		return false, refused("cuEventQuery", "null event", "pass an event from EventCreate")
	}
	if err := d.begin(); err != nil {
		return false, err
	}
	err := cudaapi.EventQuery(cudaapi.Event(e))
	d.end()
	return queryResult("cuEventQuery", err)
}

// EventSynchronize waits for the work before e.
func (d *cudaDriver) EventSynchronize(e Event) error {
	return d.onEvent("cuEventSynchronize", e, cudaapi.EventSynchronize)
}

// EventDestroy destroys an event.
func (d *cudaDriver) EventDestroy(e Event) error {
	return d.onEvent("cuEventDestroy", e, cudaapi.EventDestroy)
}

func (d *cudaDriver) onEvent(call string, e Event, f func(cudaapi.Event) error) error {
	if e == 0 {
		return refused(call, "null event", "pass an event from EventCreate")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := f(cudaapi.Event(e))
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}

// EventElapsed returns the device time between two completed timing events.
func (d *cudaDriver) EventElapsed(start, end Event) (time.Duration, error) {
	if start == 0 || end == 0 {
		return 0, refused("cuEventElapsedTime", "null event", "pass two timing events from EventCreate(true)")
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	ms, err := cudaapi.EventElapsedTime(cudaapi.Event(start), cudaapi.Event(end))
	d.end()
	if err != nil {
		return 0, callError("cuEventElapsedTime", err)
	}
	if math.IsNaN(float64(ms)) || math.IsInf(float64(ms), 0) {
		return 0, &Error{Op: "cuEventElapsedTime", Kind: KindDriver, Code: cudaapi.CUDA_ERROR_UNKNOWN, Err: cudaapi.CUDA_ERROR_UNKNOWN,
			Detail: fmt.Sprintf("returned %v ms", ms), Fix: "record both events on the same device before asking for the time"}
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// checkPinned refuses host memory that this driver did not page-lock: an
// asynchronous copy reads or writes it after the call returns, which Go
// memory cannot promise. hostMu must be held (shared).
func (d *cudaDriver) checkPinned(call, what string, b []byte) error {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if !d.host.contains(p, uintptr(len(b))) {
		return refused(call, fmt.Sprintf("%s [%#x, +%d) is not page-locked memory from HostAlloc or HostRegister", what, p, len(b)),
			"stage the bytes through pinned memory (the Backend does this for you)")
	}
	return nil
}

// MemcpyHtoDAsync queues a copy of src (page-locked) to dst on s.
func (d *cudaDriver) MemcpyHtoDAsync(dst uint64, src []byte, s Stream) error {
	const call = "cuMemcpyHtoDAsync"
	if err := d.copyArgs(call, dst, len(src), s); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	// hostMu is held shared across the enqueue so a concurrent HostFree of
	// the same block cannot slip between the check and the copy.
	unlock, err := d.lockPinned(call, "source", src)
	if err != nil {
		return err
	}
	defer unlock()
	if err := cudaapi.MemcpyHtoDAsync(cudaapi.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), cudaapi.Stream(s)); err != nil {
		return callError(call, err)
	}
	return nil
}

// MemcpyDtoHAsync queues a copy of len(dst) bytes from src into dst
// (page-locked) on s.
func (d *cudaDriver) MemcpyDtoHAsync(dst []byte, src uint64, s Stream) error {
	const call = "cuMemcpyDtoHAsync"
	if err := d.copyArgs(call, src, len(dst), s); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	unlock, err := d.lockPinned(call, "destination", dst)
	if err != nil {
		return err
	}
	defer unlock()
	if err := cudaapi.MemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), cudaapi.DevicePtr(src), uint64(len(dst)), cudaapi.Stream(s)); err != nil {
		return callError(call, err)
	}
	return nil
}

func (d *cudaDriver) copyArgs(call string, dev uint64, n int, s Stream) error {
	return d.deviceArgs(call, dev, uint64(n), s)
}

// deviceArgs refuses the legacy null stream, a null device pointer and an
// empty operation before anything reaches the driver.
func (d *cudaDriver) deviceArgs(call string, dev, n uint64, s Stream) error {
	switch {
	case s == 0:
		return nullStream(call)
	case dev == 0:
		return refused(call, "null device pointer", "pass a pointer from MemAlloc")
	case n == 0:
		return refused(call, "0 bytes", "skip empty copies")
	}
	return nil
}

// MemcpyDtoDAsync queues a device-to-device copy of n bytes on s.
func (d *cudaDriver) MemcpyDtoDAsync(dst, src uint64, n uint64, s Stream) error {
	const call = "cuMemcpyDtoDAsync"
	if src == 0 {
		return refused(call, "null source pointer", "pass a pointer from MemAlloc")
	}
	if err := d.deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.MemcpyDtoDAsync(cudaapi.DevicePtr(dst), cudaapi.DevicePtr(src), n, cudaapi.Stream(s))
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func (d *cudaDriver) MemsetD8Async(dst uint64, v byte, n uint64, s Stream) error {
	const call = "cuMemsetD8Async"
	if err := d.deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.MemsetD8Async(cudaapi.DevicePtr(dst), v, n, cudaapi.Stream(s))
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}

// ModuleLoad loads a PTX or cubin image (copied into C memory for the call).
func (d *cudaDriver) ModuleLoad(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, refused("cuModuleLoadData", "empty image", "pass PTX text or a cubin")
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	m, err := cudaapi.ModuleLoadImage(image)
	if err == nil && m == 0 {
		err = nullResult("cuModuleLoadData")
	}
	d.end()
	if err != nil {
		return 0, callError("cuModuleLoadData", err)
	}
	return Module(m), nil
}

// ModuleUnload unloads a module.
func (d *cudaDriver) ModuleUnload(m Module) error {
	if m == 0 {
		return refused("cuModuleUnload", "null module", "pass a module from ModuleLoad")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := cudaapi.ModuleUnload(cudaapi.Module(m))
	d.end()
	if err != nil {
		return callError("cuModuleUnload", err)
	}
	return nil
}

// ModuleFunction looks up a kernel entry point in m.
func (d *cudaDriver) ModuleFunction(m Module, name string) (Function, error) {
	if m == 0 || name == "" {
		return 0, refused("cuModuleGetFunction", fmt.Sprintf("module %#x, name %q", uintptr(m), name), "pass a loaded module and a kernel name")
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	f, err := cudaapi.ModuleGetFunction(cudaapi.Module(m), name)
	if err == nil && f == 0 {
		err = nullResult("cuModuleGetFunction")
	}
	d.end()
	if err != nil {
		return 0, callError("cuModuleGetFunction", err)
	}
	return Function(f), nil
}

// Launch queues a kernel launch on s. The parameters are packed into a
// pooled C buffer (the driver copies them when the launch is queued), so a
// warm driver allocates nothing per launch.
func (d *cudaDriver) Launch(f Function, cfg LaunchConfig, s Stream, args []KernelArg) error {
	const call = "cuLaunchKernel"
	if err := checkLaunch(call, f, cfg, len(args)); err != nil {
		return err
	}
	if s == 0 {
		return nullStream(call)
	}
	if err := d.begin(); err != nil {
		return err
	}
	lb := d.launchBufs.take()
	one := [1]Launch{{F: f, Cfg: cfg, Args: args}}
	_, err := queueLaunches(lb, s, one[:], len(args))
	d.launchBufs.put(lb)
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}

// hostRange is one page-locked host range: allocated with cuMemHostAlloc,
// or caller memory registered with cuMemHostRegister.
type hostRange struct {
	start, end uintptr
	p          unsafe.Pointer // start, kept as a pointer to hand back to the driver
	registered bool
}

// hostRanges is sorted by start and never overlapping.
type hostRanges []hostRange

// search returns the index of the first range starting at or after p.
func (h hostRanges) search(p uintptr) int {
	return sort.Search(len(h), func(i int) bool { return h[i].start >= p })
}

// find returns the index of the range starting exactly at p.
func (h hostRanges) find(p uintptr) (int, bool) {
	i := h.search(p)
	return i, i < len(h) && h[i].start == p
}

// contains reports whether [p, p+n) lies inside one range.
func (h hostRanges) contains(p, n uintptr) bool {
	i := h.search(p + 1) // first range starting after p; the one before may hold p
	if i == 0 {
		return false
	}
	r := h[i-1]
	return p >= r.start && p < r.end && n <= r.end-p
}

func (h hostRanges) overlaps(r hostRange) bool {
	i := h.search(r.start)
	if i < len(h) && h[i].start < r.end {
		return true
	}
	return i > 0 && h[i-1].end > r.start
}

// insert adds r unless it overlaps a range already present.
func (h *hostRanges) insert(r hostRange) bool {
	if h.overlaps(r) {
		return false
	}
	i := h.search(r.start)
	*h = append(*h, hostRange{})
	copy((*h)[i+1:], (*h)[i:])
	(*h)[i] = r
	return true
}

func (h *hostRanges) removeAt(i int) {
	*h = append((*h)[:i], (*h)[i+1:]...)
}
