package ncclapi

// The generated constants keep nccl.h's names, which Go leaves unexported;
// these are the exported names, without the nccl prefix.

// Statuses (ncclResult_t).
const (
	Success            = ncclSuccess
	UnhandledCudaError = ncclUnhandledCudaError
	SystemError        = ncclSystemError
	InternalError      = ncclInternalError
	InvalidArgument    = ncclInvalidArgument
	InvalidUsage       = ncclInvalidUsage
	RemoteError        = ncclRemoteError
	InProgress         = ncclInProgress
)

// Element types (ncclDataType_t).
const (
	Int8     = ncclInt8
	Uint8    = ncclUint8
	Int32    = ncclInt32
	Uint32   = ncclUint32
	Int64    = ncclInt64
	Uint64   = ncclUint64
	Float16  = ncclFloat16
	Float32  = ncclFloat32
	Float64  = ncclFloat64
	BFloat16 = ncclBfloat16
)

// Reductions (ncclRedOp_t).
const (
	Sum  = ncclSum
	Prod = ncclProd
	Max  = ncclMax
	Min  = ncclMin
	Avg  = ncclAvg
)
