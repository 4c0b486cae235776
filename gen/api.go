package main

// driverEntries lists the driver entry points the bindings wrap, one line each, by the
// name the CUDA documentation uses. The header's macros decide which symbol each one
// resolves to (cuMemAlloc becomes cuMemAlloc_v2) unless symbol pins it. Parameters are
// classified by the rules in types.go; roles overrides that classification for
// parameters the rules cannot guess.
//
// since is the CUDA version (1000*major + 10*minor) that introduced the oldest symbol
// the wrapper can call; the generator checks it against every header it reads (a
// header at or above it must declare the entry point, one below it must not). Entry
// points newer than the oldest supported header (CUDA 11.8) carry proto, their
// parameter list, so that an older header still yields the same Go function, as a stub
// returning *MissingSymbolError; the generator checks proto against newer headers.
var driverEntries = []entry{
	{name: "cuGetErrorName", since: 6000},
	{name: "cuGetErrorString", since: 6000},
	{name: "cuInit", since: 2000},
	{name: "cuDriverGetVersion", since: 2020},
	{name: "cuDeviceGetCount", since: 2000},
	{name: "cuDeviceGet", since: 2000},
	{name: "cuDeviceGetName", since: 2000, roles: roles{"name": outText("len")}},
	{name: "cuDeviceTotalMem", since: 3020},
	{name: "cuDeviceGetAttribute", since: 2000},
	{name: "cuDeviceCanAccessPeer", since: 4000},
	{name: "cuDeviceGetP2PAttribute", since: 8000},
	{name: "cuDevicePrimaryCtxRetain", since: 7000},
	{name: "cuDevicePrimaryCtxRelease", since: 11000},
	{name: "cuCtxSetCurrent", since: 4000},
	{name: "cuCtxGetCurrent", since: 4000},
	{name: "cuCtxSynchronize", since: 2000},
	{name: "cuCtxEnablePeerAccess", since: 4000},
	{name: "cuCtxDisablePeerAccess", since: 4000},
	{name: "cuMemGetInfo", since: 3020},
	{name: "cuMemAlloc", since: 3020},
	{name: "cuMemFree", since: 3020},
	{name: "cuMemHostAlloc", since: 2020},
	{name: "cuMemFreeHost", since: 2000},
	{name: "cuMemHostRegister", since: 6050},
	{name: "cuMemHostUnregister", since: 4000},
	{name: "cuMemHostGetDevicePointer", since: 3020},
	{name: "cuMemcpyHtoD", since: 3020},
	{name: "cuMemcpyDtoH", since: 3020},
	{name: "cuMemcpyHtoDAsync", since: 3020},
	{name: "cuMemcpyDtoHAsync", since: 3020},
	{name: "cuMemcpyDtoDAsync", since: 3020},
	{name: "cuMemcpyPeerAsync", since: 4000},
	{name: "cuMemsetD8Async", since: 3020},
	{name: "cuMemcpyBatchAsync", symbol: "cuMemcpyBatchAsync_v2", since: 13000, roles: roles{
		"dsts": slice("count"), "srcs": slice("count"), "sizes": slice("count"),
		"attrs": raw(), "attrsIdxs": slice("numAttrs"),
	}, proto: "CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream"},
	// Stream-ordered memory pools.
	{name: "cuMemAllocAsync", since: 11020},
	{name: "cuMemFreeAsync", since: 11020},
	{name: "cuMemAllocFromPoolAsync", since: 11020},
	{name: "cuDeviceGetDefaultMemPool", since: 11020},
	{name: "cuMemPoolCreate", since: 11020, roles: roles{"poolProps": raw()}},
	{name: "cuMemPoolDestroy", since: 11020},
	{name: "cuMemPoolSetAttribute", since: 11020},
	{name: "cuMemPoolGetAttribute", since: 11020},
	{name: "cuMemPoolTrimTo", since: 11020},
	// Virtual memory management.
	{name: "cuMemAddressReserve", since: 10020},
	{name: "cuMemAddressFree", since: 10020},
	{name: "cuMemCreate", since: 10020},
	{name: "cuMemRelease", since: 10020},
	{name: "cuMemMap", since: 10020},
	{name: "cuMemUnmap", since: 10020},
	{name: "cuMemSetAccess", since: 10020},
	{name: "cuMemGetAllocationGranularity", since: 10020},
	{name: "cuStreamCreate", since: 2000},
	{name: "cuStreamDestroy", since: 4000},
	{name: "cuStreamSynchronize", since: 2000},
	{name: "cuStreamQuery", since: 2000},
	{name: "cuStreamWaitEvent", since: 3020},
	// Stream memory operations: a write of a 32-bit word queued behind a
	// stream's work (completion marks in host memory the device can reach).
	{name: "cuStreamWriteValue32", symbol: "cuStreamWriteValue32_v2", fallback: "cuStreamWriteValue32", since: 8000},
	{name: "cuLaunchHostFunc", goName: "launchHostFunc", since: 10000},
	{name: "cuEventCreate", since: 2000},
	{name: "cuEventRecord", since: 2000},
	{name: "cuEventQuery", since: 2000},
	{name: "cuEventSynchronize", since: 2000},
	{name: "cuEventElapsedTime", symbol: "cuEventElapsedTime_v2", fallback: "cuEventElapsedTime", since: 2000},
	{name: "cuEventDestroy", since: 4000},
	{name: "cuModuleLoadData", since: 2000},
	{name: "cuModuleUnload", since: 2000},
	{name: "cuModuleGetFunction", since: 2000},
	{name: "cuFuncGetAttribute", since: 2020},
	{name: "cuLaunchKernel", since: 4000, roles: roles{"kernelParams": raw(), "extra": raw()}},
	// Extended launch: attributes such as programmatic stream serialization
	// (programmatic dependent launch on compute capability 9.0 and newer).
	{name: "cuLaunchKernelEx", since: 11080, roles: roles{"config": raw(), "kernelParams": raw(), "extra": raw()}},
	{name: "cuOccupancyMaxActiveBlocksPerMultiprocessor", since: 6050},
	{name: "cuOccupancyMaxPotentialBlockSize", since: 6050},
	// Graphs and stream capture.
	{name: "cuStreamBeginCapture", since: 10010},
	{name: "cuStreamEndCapture", since: 10000},
	{name: "cuStreamIsCapturing", since: 10000},
	{name: "cuGraphCreate", since: 10000},
	{name: "cuGraphDestroy", since: 10000},
	{name: "cuGraphInstantiateWithFlags", since: 11040},
	{name: "cuGraphUpload", since: 11010},
	{name: "cuGraphLaunch", since: 10000},
	{name: "cuGraphExecDestroy", since: 10000},
}

// constantEnums are C enums whose enumerators are flag values passed as plain
// integers (unsigned int Flags); they become untyped Go constants.
var constantEnums = []string{"CUevent_flags", "CUstream_flags", "CUstreamWriteValue_flags"}

// constantMacros are object-like macros holding one integer literal, emitted as
// untyped Go constants under the same name.
var constantMacros = []string{
	"CU_MEMHOSTALLOC_PORTABLE", "CU_MEMHOSTALLOC_DEVICEMAP", "CU_MEMHOSTALLOC_WRITECOMBINED",
	"CU_MEMHOSTREGISTER_PORTABLE", "CU_MEMHOSTREGISTER_DEVICEMAP", "CU_MEMHOSTREGISTER_IOMEMORY",
	"CU_MEMHOSTREGISTER_READ_ONLY",
}

// entry is one wanted entry point.
type entry struct {
	name string // documented name, before the header's remapping macros
	// symbol, when set, pins the C symbol to bind instead of the one the
	// header's macros select: the stable one when a newer version changed the
	// signature (cuMemcpyBatchAsync_v2).
	symbol string
	// fallback is an older symbol with the same C signature, resolved when the
	// loaded library lacks the newer one.
	fallback string
	since    int    // CUDA version that introduced the oldest symbol the wrapper calls
	proto    string // C parameter list, for entries newer than the oldest supported header
	goName   string // Go name when the naming rule's is not wanted (lower-case: unexported)
	roles    roles  // parameter name -> role, where the default classification is wrong
}

// roles maps a C parameter name to how the wrapper passes it.
type roles map[string]role

// roleKind says how a wrapper passes one parameter.
type roleKind int

const (
	roleAuto    roleKind = iota // decided by the type rules
	roleRaw                     // any pointer, passed as unsafe.Pointer
	roleOutText                 // char buffer the driver fills; lenParam names its capacity
	roleSlice                   // pointer to lenParam elements, passed as a Go slice
	roleDevPtr                  // void* holding a device address, passed as uint64
)

// role is a parameter's override.
type role struct {
	kind     roleKind
	lenParam string
}

func raw() role               { return role{kind: roleRaw} }
func outText(n string) role   { return role{kind: roleOutText, lenParam: n} }
func slice(count string) role { return role{kind: roleSlice, lenParam: count} }
func devPtr() role            { return role{kind: roleDevPtr} }
