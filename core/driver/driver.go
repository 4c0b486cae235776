// Package driver is the seam between package core and a device, in the
// place database/sql/driver has for database/sql: the Driver interface of
// raw device operations, the optional interfaces a driver may also
// implement (found by type assertion), and the plain value types they pass.
//
// It owns names and contracts only. Budgets, pooling, fusion, validation
// and concurrency policy live in core's Backend above it; the two
// implementations live beside it (core/cuda over the CUDA driver API,
// core/sim for a simulated device). It imports nothing but the standard
// library, so a driver can be written without depending on core.
package driver

import (
	"time"
	"unsafe"
)

// Stream is a driver stream handle. The zero value is the legacy null stream,
// which the Backend never passes to a driver: a zero Stream returned with a
// nil error is rejected as a null-success result.
type Stream uintptr

// Event is a driver event handle. The zero value is never a valid event.
type Event uintptr

// Module is a loaded code module handle. The zero value is never valid.
type Module uintptr

// Function is a kernel entry point inside a Module. The zero value is never valid.
type Function uintptr

// DeviceInfo describes the device a Driver talks to.
type DeviceInfo struct {
	Ordinal     int    // device ordinal the driver was opened on
	Name        string // marketing name, e.g. "NVIDIA H200"
	TotalMemory uint64 // bytes of device memory
	CCMajor     int    // compute capability, major
	CCMinor     int    // compute capability, minor
	// FeatureKey identifies what compiled code and cached uploads depend on
	// (architecture and driver); the static upload cache mixes it into its keys.
	FeatureKey uint64
}

// LaunchConfig is the geometry of one kernel launch.
type LaunchConfig struct {
	Grid      [3]uint32
	Block     [3]uint32
	SharedMem uint32
}

// Driver is the narrow device seam a Backend is built on, in the spirit of
// database/sql/driver: it exposes raw device operations and nothing else.
// Budgets, pooling, fusion, validation and concurrency policy live in the
// Backend above it. Two implementations exist: the real one over cudaapi
// (core/cuda, which core.OpenCUDA opens) and the simulated device in
// core/sim.
//
// Errors from a Driver carry a CUDA result code as a cudaapi.Result (found with
// errors.As); the Backend wraps them in a core.Error with Kind KindDriver. A Driver
// must be safe for concurrent use. Host memory passed to asynchronous copies
// must stay valid until the stream they were queued on has been synchronized;
// the Backend only passes pinned memory to them.
type Driver interface {
	// Info reports the device the driver is bound to.
	Info() (DeviceInfo, error)
	// MemGetInfo reports live free and total device memory in bytes.
	MemGetInfo() (free, total uint64, err error)

	// MemAlloc allocates n > 0 bytes of device memory.
	MemAlloc(n uint64) (uint64, error)
	// MemFree frees a pointer returned by MemAlloc.
	MemFree(ptr uint64) error

	// HostAlloc allocates n > 0 bytes of page-locked host memory and returns
	// it as a slice whose backing array is that memory.
	HostAlloc(n uint64) ([]byte, error)
	// HostFree frees memory returned by HostAlloc; p is its first byte.
	HostFree(p unsafe.Pointer) error
	// HostRegister page-locks n bytes of caller memory starting at p.
	HostRegister(p unsafe.Pointer, n uint64) error
	// HostUnregister undoes HostRegister for the range starting at p.
	HostUnregister(p unsafe.Pointer) error

	// StreamCreate creates a non-blocking stream (never the legacy null stream).
	StreamCreate() (Stream, error)
	// StreamDestroy destroys a stream.
	StreamDestroy(s Stream) error
	// StreamSynchronize blocks until all work queued on s has completed.
	StreamSynchronize(s Stream) error
	// StreamQuery reports whether all work queued on s has completed.
	StreamQuery(s Stream) (done bool, err error)
	// StreamWaitEvent makes future work on s wait for e.
	StreamWaitEvent(s Stream, e Event) error

	// EventCreate creates an event; timing selects whether it records time.
	EventCreate(timing bool) (Event, error)
	// EventRecord records e at the current end of s.
	EventRecord(e Event, s Stream) error
	// EventQuery reports whether the work before e has completed.
	EventQuery(e Event) (done bool, err error)
	// EventSynchronize blocks until the work before e has completed.
	EventSynchronize(e Event) error
	// EventElapsed returns the device time between two completed timing events.
	EventElapsed(start, end Event) (time.Duration, error)
	// EventDestroy destroys an event.
	EventDestroy(e Event) error

	// MemcpyHtoDAsync queues a copy of src to device address dst on s.
	MemcpyHtoDAsync(dst uint64, src []byte, s Stream) error
	// MemcpyDtoHAsync queues a copy of len(dst) bytes from device address src on s.
	MemcpyDtoHAsync(dst []byte, src uint64, s Stream) error
	// MemcpyDtoDAsync queues a device-to-device copy of n bytes on s.
	MemcpyDtoDAsync(dst, src uint64, n uint64, s Stream) error
	// MemsetD8Async queues setting n bytes at dst to v on s.
	MemsetD8Async(dst uint64, v byte, n uint64, s Stream) error

	// ModuleLoad loads a code image (PTX or cubin).
	ModuleLoad(image []byte) (Module, error)
	// ModuleUnload unloads a module.
	ModuleUnload(m Module) error
	// ModuleFunction looks up a kernel entry point in m.
	ModuleFunction(m Module, name string) (Function, error)
	// Launch queues a kernel launch on s.
	Launch(f Function, cfg LaunchConfig, s Stream, args []KernelArg) error
}

// KernelMemory gives a host kernel access to simulated device memory.
type KernelMemory interface {
	// Bytes returns the n bytes of device memory at ptr, or an error when the
	// range is not inside one live allocation.
	Bytes(ptr uint64, n int) ([]byte, error)
}

// HostKernel is the Go twin of a device kernel: it computes on simulated
// device memory what the kernel computes on a GPU, for the same launch
// geometry and arguments.
type HostKernel func(mem KernelMemory, cfg LaunchConfig, args []KernelArg) error

// HostKernelBinder is an optional Driver capability, found by type assertion:
// a driver that cannot run device code (core/sim) runs the bound Go function
// whenever f is launched. Real drivers do not implement it.
type HostKernelBinder interface {
	BindHostKernel(f Function, k HostKernel) error
}

// PageableCopier is an optional Driver capability, found by type assertion:
// plain synchronous copies between device memory and ordinary (pageable)
// host memory, which the driver stages itself (cuMemcpyHtoD and
// cuMemcpyDtoH). The Backend never uses them; they exist so benchmarks can
// compare its transfers with the driver's own handling of a Go slice. Each
// returns when its copy has completed.
type PageableCopier interface {
	// MemcpyHtoD copies src to device address dst.
	MemcpyHtoD(dst uint64, src []byte) error
	// MemcpyDtoH copies len(dst) bytes from device address src into dst.
	MemcpyDtoH(dst []byte, src uint64) error
}

// InlineCopier is an optional Driver capability, found by type assertion,
// that a driver reporting Capabilities.InlineCopies offers: queueing a
// host-to-device copy from ordinary (pageable) host memory whose bytes the
// driver has read by the time the call returns, as CUDA's
// cuMemcpyHtoDAsync does with a pageable source. The caller may reuse src
// at once; the copy still lands in stream order.
type InlineCopier interface {
	MemcpyHtoDInline(dst uint64, src []byte, s Stream) error
}
