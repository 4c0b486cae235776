package main

import "modernc.org/cc/v4"

// typeClass says how a mapped C type travels between Go and C.
type typeClass int

const (
	classValue  typeClass = iota // integer or float passed by value
	classHandle                  // opaque struct pointer, carried in Go as a uintptr-based type
	classStruct                  // struct passed by value; abi names its stand-in in library.cDecls
)

// typeRule maps one C typedef to a Go type. It is the declarative table the
// generator follows: nothing else in the generator knows a CUDA type by name.
type typeRule struct {
	c     string    // typedef name as the header spells it
	goTyp string    // Go type used in wrapper signatures
	abi   string    // C type the trampoline takes from Go (no CUDA typedefs)
	class typeClass // value or handle
	// decl, when set, makes the generator declare goTyp with this underlying
	// type and doc comment in ztypes.go.
	decl, doc string
	// enum, when set, makes the generator emit the C enum's enumerators as
	// constants of goTyp.
	enum bool
}

// driverTypes is cuda.h's C-to-Go type table; the status type comes first.
var driverTypes = []typeRule{
	{c: "CUresult", goTyp: "Result", abi: "int", enum: true},
	{c: "CUdeviceptr", goTyp: "DevicePtr", abi: "unsigned long long", decl: "uint64",
		doc: "DevicePtr is a device memory address (CUdeviceptr). Zero is the null address."},
	{c: "CUdevice", goTyp: "Device", abi: "int", decl: "int32",
		doc: "Device is a device ordinal handle (CUdevice) as returned by DeviceGet."},
	{c: "CUcontext", goTyp: "Context", class: classHandle, decl: "uintptr",
		doc: "Context is an opaque CUDA context handle (CUcontext). Zero is no context."},
	{c: "CUstream", goTyp: "Stream", class: classHandle, decl: "uintptr",
		doc: "Stream is an opaque stream handle (CUstream). Zero is the legacy default stream."},
	{c: "CUevent", goTyp: "Event", class: classHandle, decl: "uintptr",
		doc: "Event is an opaque event handle (CUevent)."},
	{c: "CUmodule", goTyp: "Module", class: classHandle, decl: "uintptr",
		doc: "Module is an opaque loaded-module handle (CUmodule)."},
	{c: "CUfunction", goTyp: "Function", class: classHandle, decl: "uintptr",
		doc: "Function is an opaque kernel function handle (CUfunction)."},
	{c: "CUgraph", goTyp: "Graph", class: classHandle, decl: "uintptr",
		doc: "Graph is an opaque CUDA graph handle (CUgraph)."},
	{c: "CUgraphExec", goTyp: "GraphExec", class: classHandle, decl: "uintptr",
		doc: "GraphExec is an opaque executable graph handle (CUgraphExec)."},
	{c: "CUgraphNode", goTyp: "GraphNode", class: classHandle, decl: "uintptr",
		doc: "GraphNode is an opaque graph node handle (CUgraphNode)."},
	{c: "CUmemoryPool", goTyp: "MemoryPool", class: classHandle, decl: "uintptr",
		doc: "MemoryPool is an opaque stream-ordered memory pool handle (CUmemoryPool)."},
	{c: "CUmemGenericAllocationHandle", goTyp: "MemGenericAllocationHandle", abi: "unsigned long long", decl: "uint64",
		doc: "MemGenericAllocationHandle is a physical allocation made by MemCreate (CUmemGenericAllocationHandle)."},
	{c: "CUdevice_attribute", goTyp: "DeviceAttribute", abi: "int", decl: "int32", enum: true,
		doc: "DeviceAttribute selects what DeviceGetAttribute reports (CUdevice_attribute)."},
	{c: "CUfunction_attribute", goTyp: "FunctionAttribute", abi: "int", decl: "int32", enum: true,
		doc: "FunctionAttribute selects what FuncGetAttribute reports (CUfunction_attribute)."},
	{c: "CUstreamCaptureMode", goTyp: "StreamCaptureMode", abi: "int", decl: "int32", enum: true,
		doc: "StreamCaptureMode selects how StreamBeginCapture interacts with other threads (CUstreamCaptureMode)."},
	{c: "CUstreamCaptureStatus", goTyp: "StreamCaptureStatus", abi: "int", decl: "int32", enum: true,
		doc: "StreamCaptureStatus is what StreamIsCapturing reports (CUstreamCaptureStatus)."},
	{c: "CUmemPool_attribute", goTyp: "MemPoolAttribute", abi: "int", decl: "int32", enum: true,
		doc: "MemPoolAttribute selects what MemPoolSetAttribute and MemPoolGetAttribute access (CUmemPool_attribute)."},
	{c: "CUlaunchAttributeID", goTyp: "LaunchAttributeID", abi: "int", decl: "int32", enum: true,
		doc: "LaunchAttributeID names one attribute of an extended launch (LaunchKernelEx) (CUlaunchAttributeID)."},
	{c: "size_t", goTyp: "uint64", abi: "size_t"},
}

// basicRule maps a C arithmetic type that reached the generator without a
// listed typedef.
type basicRule struct{ goTyp, abi string }

// kindRules maps C arithmetic kinds; enums not in typeRules travel as int32.
var kindRules = map[cc.Kind]basicRule{
	cc.Char:      {"int8", "char"},
	cc.SChar:     {"int8", "signed char"},
	cc.UChar:     {"uint8", "unsigned char"},
	cc.Short:     {"int16", "short"},
	cc.UShort:    {"uint16", "unsigned short"},
	cc.Int:       {"int32", "int"},
	cc.UInt:      {"uint32", "unsigned int"},
	cc.Long:      {"int64", "long"},
	cc.ULong:     {"uint64", "unsigned long"},
	cc.LongLong:  {"int64", "long long"},
	cc.ULongLong: {"uint64", "unsigned long long"},
	cc.Float:     {"float32", "float"},
	cc.Double:    {"float64", "double"},
	cc.Enum:      {"int32", "int"},
}

// cgoNames spells ABI C types the way cgo exposes them to Go.
var cgoNames = map[string]string{
	"char": "C.char", "signed char": "C.schar", "unsigned char": "C.uchar",
	"short": "C.short", "unsigned short": "C.ushort", "int": "C.int", "unsigned int": "C.uint",
	"long": "C.long", "unsigned long": "C.ulong", "long long": "C.longlong",
	"unsigned long long": "C.ulonglong", "float": "C.float", "double": "C.double",
	"size_t": "C.size_t", "uintptr_t": "C.uintptr_t",
}
