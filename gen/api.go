package main

// entryPoints lists the driver entry points the bindings wrap, by the name the CUDA
// documentation uses. The header's macros decide which symbol each one resolves to
// (cuMemAlloc becomes cuMemAlloc_v2, cuGraphInstantiate becomes cuGraphInstantiateWithFlags),
// so adding an entry point is one line here. Parameters are classified by the rules in
// types.go; roles overrides that classification for parameters the rules cannot guess.
var entryPoints = []entry{
	{name: "cuGetErrorName"},
	{name: "cuGetErrorString"},
	{name: "cuInit"},
	{name: "cuDriverGetVersion"},
	{name: "cuDeviceGetCount"},
	{name: "cuDeviceGet"},
	{name: "cuDeviceGetName", roles: roles{"name": outText("len")}},
	{name: "cuDeviceTotalMem"},
	{name: "cuDeviceGetAttribute"},
	{name: "cuDeviceCanAccessPeer"},
	{name: "cuDevicePrimaryCtxRetain"},
	{name: "cuDevicePrimaryCtxRelease"},
	{name: "cuCtxSetCurrent"},
	{name: "cuCtxGetCurrent"},
	{name: "cuCtxSynchronize"},
	{name: "cuCtxEnablePeerAccess"},
	{name: "cuMemGetInfo"},
	{name: "cuMemAlloc"},
	{name: "cuMemFree"},
	{name: "cuMemAllocAsync"},
	{name: "cuMemFreeAsync"},
	{name: "cuMemHostAlloc"},
	{name: "cuMemFreeHost"},
	{name: "cuMemHostRegister"},
	{name: "cuMemHostUnregister"},
	{name: "cuMemcpyHtoD"},
	{name: "cuMemcpyDtoH"},
	{name: "cuMemcpyHtoDAsync"},
	{name: "cuMemcpyDtoHAsync"},
	{name: "cuMemcpyDtoDAsync"},
	{name: "cuMemcpyPeerAsync"},
	{name: "cuMemsetD8Async"},
	{name: "cuMemcpyBatchAsync", optional: true, roles: roles{
		"dsts": slice("count"), "srcs": slice("count"), "sizes": slice("count"),
		"attrs": raw(), "attrsIdxs": slice("numAttrs"),
	}},
	{name: "cuStreamCreate"},
	{name: "cuStreamDestroy"},
	{name: "cuStreamSynchronize"},
	{name: "cuStreamQuery"},
	{name: "cuStreamWaitEvent"},
	{name: "cuStreamBeginCapture"},
	{name: "cuStreamEndCapture"},
	{name: "cuEventCreate"},
	{name: "cuEventRecord"},
	{name: "cuEventQuery"},
	{name: "cuEventSynchronize"},
	{name: "cuEventElapsedTime"},
	{name: "cuEventDestroy"},
	{name: "cuModuleLoadData"},
	{name: "cuModuleUnload"},
	{name: "cuModuleGetFunction"},
	{name: "cuFuncGetAttribute"},
	{name: "cuLaunchKernel", roles: roles{"kernelParams": raw(), "extra": raw()}},
	{name: "cuGraphInstantiate"},
	{name: "cuGraphLaunch"},
	{name: "cuGraphExecDestroy"},
	{name: "cuGraphDestroy"},
}

// constantEnums are C enums whose enumerators are flag values passed as plain
// integers (unsigned int Flags); they become untyped Go constants.
var constantEnums = []string{"CUevent_flags", "CUstream_flags"}

// constantMacros are object-like macros holding one integer literal, emitted as
// untyped Go constants under the same name.
var constantMacros = []string{
	"CU_MEMHOSTALLOC_PORTABLE", "CU_MEMHOSTALLOC_DEVICEMAP", "CU_MEMHOSTALLOC_WRITECOMBINED",
	"CU_MEMHOSTREGISTER_PORTABLE", "CU_MEMHOSTREGISTER_DEVICEMAP", "CU_MEMHOSTREGISTER_IOMEMORY",
	"CU_MEMHOSTREGISTER_READ_ONLY",
}

// entry is one wanted driver entry point.
type entry struct {
	name     string // documented name, before the header's remapping macros
	optional bool   // newer than the oldest supported header: absence is expected
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
)

// role is a parameter's override.
type role struct {
	kind     roleKind
	lenParam string
}

func raw() role               { return role{kind: roleRaw} }
func outText(n string) role   { return role{kind: roleOutText, lenParam: n} }
func slice(count string) role { return role{kind: roleSlice, lenParam: count} }
