// Package ncclapi is the thin, typed binding to NCCL, NVIDIA's collective
// communication library (libnccl), that core's collectives on real devices
// are built on. It owns the generated wrappers (znccl_*.go), the Result type
// and its error text, and the loader that finds libnccl at run time. It holds
// no policy; core owns communicators' lifetimes and which streams they use.
//
// # Generated wrappers
//
// Each wrapped entry point is one Go function generated from nccl.h by ../gen
// (-lib nccl); the Go name drops the nccl prefix: ncclAllReduce is AllReduce.
// ncclComm_t is Comm and cudaStream_t is Stream (the driver's CUstream, so a
// cudaapi.Stream converts directly); ncclUniqueId is UniqueId, 128 bytes
// passed by value; the send and receive buffers of collectives are device
// addresses (uint64); ncclDataType_t and ncclRedOp_t are DataType and RedOp,
// with the exported constants of enums.go. nccl.h includes the CUDA runtime's
// headers, which the generator does not read: a prelude written by this
// project declares cudaStream_t in their place.
//
// Every wrapper returns nil on ncclSuccess, a Result for any other status,
// an error matching ErrLibraryNotFound when libnccl cannot be loaded (or the
// binary was built without cgo), and a *MissingSymbolError when the loaded
// library lacks that one symbol.
//
// # Loading
//
// The library is dlopened on first use: $VYRECUDA_LIBNCCL when set, else
// libnccl.so.2 (found through the usual search path; NCCL's Python wheel
// installs it under nvidia/nccl/lib). Nothing is linked at build time.
//
// nccl.h is NVIDIA's and is never committed: regenerate with
// `make generate NCCL_H=path/to/nccl.h`.
package ncclapi

//go:generate go run ../gen -lib nccl -pkg ncclapi
