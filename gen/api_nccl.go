package main

import "fmt"

// ncclLibrary is NCCL, the collective communication library (libnccl, nccl.h).
// nccl.h includes the CUDA runtime's headers for cudaStream_t and the half
// types; the generator has none of them, so a prelude written here declares
// the one type the entry points use in their place.
var ncclLibrary = library{
	name:         "nccl",
	header:       "nccl.h",
	headerEnv:    "NCCL_H",
	versionMacro: "NCCL_VERSION_CODE",
	versionConst: "HeaderVersion",
	status:       ncclTypes[0],
	success:      "ncclSuccess",

	entries: ncclEntries,
	types:   ncclTypes,

	loader:   "library",
	notFound: "ErrLibraryNotFound",
	files:    [4]string{"znccl_result.go", "znccl_types.go", "znccl_cgo.go", "znccl_nocgo.go"},

	prelude: `/* vyrecuda's stand-in for the CUDA runtime headers nccl.h includes. */
#include <stddef.h>
typedef struct CUstream_st *cudaStream_t;
#define CUDART_VERSION 12000
`,
	replaceIncludes: []string{"cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"},
	cDecls:          "typedef struct { char internal[128]; } vyre_ncclUniqueId;\n\n",
	versionName:     ncclVersion,
}

// ncclVersion spells an NCCL_VERSION_CODE: 2.8.x and older are
// 1000*major + 100*minor + patch (2708), later ones 10000*major +
// 100*minor + patch (22803).
func ncclVersion(v int) string {
	if v < 10000 {
		return fmt.Sprintf("NCCL %d.%d.%d", v/1000, v%1000/100, v%100)
	}
	return fmt.Sprintf("NCCL %d.%d.%d", v/10000, v%10000/100, v%100)
}

// ncclTypes is nccl.h's C-to-Go type table; the status type comes first.
var ncclTypes = []typeRule{
	{c: "ncclResult_t", goTyp: "Result", abi: "int", enum: true},
	{c: "ncclComm_t", goTyp: "Comm", class: classHandle, decl: "uintptr",
		doc: "Comm is an opaque communicator handle (ncclComm_t). Zero is no communicator."},
	{c: "cudaStream_t", goTyp: "Stream", class: classHandle, decl: "uintptr",
		doc: "Stream is a CUDA stream (cudaStream_t, the same handle as the driver's CUstream)."},
	{c: "ncclUniqueId", goTyp: "UniqueId", abi: "vyre_ncclUniqueId", class: classStruct, decl: "[128]byte",
		doc: "UniqueId identifies a communicator that ranks join with CommInitRank (ncclUniqueId, 128 bytes)."},
	{c: "ncclDataType_t", goTyp: "DataType", abi: "int", decl: "int32", enum: true,
		doc: "DataType is the element type of a collective (ncclDataType_t)."},
	{c: "ncclRedOp_t", goTyp: "RedOp", abi: "int", decl: "int32", enum: true,
		doc: "RedOp is the reduction of a collective (ncclRedOp_t)."},
	{c: "size_t", goTyp: "uint64", abi: "size_t"},
}

// ncclEntries lists the NCCL entry points the bindings wrap. since is in
// NCCL_VERSION_CODE units (2.0.0 is 2000): every entry here is in NCCL 2.
// Buffers of collectives are device addresses (devPtr); Go names drop the
// nccl prefix.
var ncclEntries = []entry{
	{name: "ncclGetVersion", goName: "GetVersion", since: 2000},
	{name: "ncclGetUniqueId", goName: "GetUniqueId", since: 2000},
	{name: "ncclCommInitRank", goName: "CommInitRank", since: 2000},
	{name: "ncclCommInitAll", goName: "CommInitAll", since: 2000, roles: roles{"comm": slice("ndev"), "devlist": slice("ndev")}},
	{name: "ncclCommDestroy", goName: "CommDestroy", since: 2000},
	{name: "ncclCommAbort", goName: "CommAbort", since: 2000},
	{name: "ncclCommGetAsyncError", goName: "CommGetAsyncError", since: 2000},
	{name: "ncclCommCount", goName: "CommCount", since: 2000},
	{name: "ncclCommCuDevice", goName: "CommCuDevice", since: 2000},
	{name: "ncclCommUserRank", goName: "CommUserRank", since: 2000},
	{name: "ncclAllReduce", goName: "AllReduce", since: 2000, roles: roles{"sendbuff": devPtr(), "recvbuff": devPtr()}},
	{name: "ncclBroadcast", goName: "Broadcast", since: 2000, roles: roles{"sendbuff": devPtr(), "recvbuff": devPtr()}},
	{name: "ncclAllGather", goName: "AllGather", since: 2000, roles: roles{"sendbuff": devPtr(), "recvbuff": devPtr()}},
	{name: "ncclReduceScatter", goName: "ReduceScatter", since: 2000, roles: roles{"sendbuff": devPtr(), "recvbuff": devPtr()}},
	{name: "ncclGroupStart", goName: "GroupStart", since: 2000},
	{name: "ncclGroupEnd", goName: "GroupEnd", since: 2000},
}
