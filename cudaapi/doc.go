// Package cudaapi is the thin, typed binding to the CUDA driver API (libcuda)
// that the rest of vyrecuda is built on. It owns the generated wrappers
// (z*.go), the Result type and its error text, and the loader that finds
// libcuda at run time. It holds no policy: no budgets, retries or context
// management; callers (core's real-driver adapter) own all of that.
//
// # Generated wrappers
//
// Each wrapped entry point is one Go function generated from cuda.h by
// ../gen. Naming rule: the documented C name loses its cu prefix and any _vN
// suffix: cuMemAlloc (symbol cuMemAlloc_v2) is MemAlloc, cuCtxGetCurrent is
// CtxGetCurrent. The symbol resolved is the one the header's macros select
// (MemAlloc calls cuMemAlloc_v2), except where the generator pins the stable
// one: GraphInstantiateWithFlags, and MemcpyBatchAsync (cuMemcpyBatchAsync_v2).
// Each doc comment names the CUDA version the call needs. Parameters map as
// follows:
//
//   - CUdeviceptr is DevicePtr (uint64); CUdevice is Device; each opaque handle
//     (CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph, CUgraphExec,
//     CUgraphNode, CUmemoryPool) is its own uintptr-based type, zero meaning
//     NULL; CUmemGenericAllocationHandle is MemGenericAllocationHandle (uint64).
//   - Parameter names are the header's, in camelCase (pool_out is poolOut).
//   - size_t is uint64; int is int32; unsigned int is uint32.
//   - Out-parameters are returned, in order, before the error:
//     MemAlloc(n uint64) (DevicePtr, error).
//   - const char* in is a string; const char** out is a string.
//   - void* (host memory) and pointers to structs or functions stay
//     unsafe.Pointer.
//
// Every wrapper returns a nil error on CUDA_SUCCESS, a Result for any other
// driver status, ErrDriverNotFound when libcuda cannot be loaded, and a
// *MissingSymbolError (matching ErrMissingSymbol) when the installed driver
// lacks that one symbol; all other calls keep working. Nothing panics.
//
// # Driver versions
//
// The Go API is the same whichever cuda.h from CUDA 11.8 to 13.x the files were
// generated from, and the bindings load on any driver from 11.8 on. A call
// the driver is too old for returns *MissingSymbolError carrying the symbol,
// the CUDA version that introduced it (Since) and the loaded driver's version
// (Driver). Where a newer symbol kept its predecessor's C signature, the
// wrapper falls back to the older one (EventElapsedTime calls
// cuEventElapsedTime_v2, or cuEventElapsedTime on drivers before 12.8). A
// function the generating header did not declare always returns
// *MissingSymbolError (Header set). DriverCapabilities reports which optional
// features (Feature) the loaded driver offers.
//
// # Host functions
//
// LaunchHostFunc queues a Go func() on a stream. The driver calls a C
// trampoline with a C-allocated cell holding a cgo.Handle, so no Go pointer
// crosses into C; the handle and cell are released when the function runs, or
// at once when the launch fails.
//
// # Host pointers and cgo
//
// Host memory passes as unsafe.Pointer and must not contain Go pointers (cgo's
// pointer rules). Synchronous copies (MemcpyHtoD, MemcpyDtoH) may use Go memory:
// the call returns only after the driver is done with it. Asynchronous copies
// (MemcpyHtoDAsync, MemcpyDtoHAsync) must use pinned C memory from MemHostAlloc
// or memory registered with MemHostRegister that is not Go-managed, because the
// copy outlives the call and Go may move or free its own memory. Kernel
// parameters go through KernelParams, which keeps values and the pointer
// array in C memory so a launch passes no Go pointers.
//
// # Loading
//
// libcuda.so.1 (or the path in $VYRECUDA_LIBCUDA) is opened on the first call,
// and each symbol is looked up on its first use. Loaded reports whether that
// worked. Built with CGO_ENABLED=0 the package compiles and every wrapper
// returns ErrDriverNotFound.
//
// # Regenerating
//
// The committed files come from CUDA 13.0's cuda.h (see HeaderVersion). With a
// copy of that header outside version control:
//
//	make generate CUDA_H=.cache/cuda/cuda.h
//
// which runs the go:generate line below with $CUDA_H set.
package cudaapi

//go:generate go run ../gen -out .
