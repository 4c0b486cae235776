package core

import (
	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// Names that moved out of core keep their core spelling here, as type
// aliases and re-declared constants, so code written against core.Driver,
// core.ParamInt32 and the rest compiles unchanged. Each is the very same
// type or value as the one in its new package.

// The error type (package core/internal/errs).

// Error is the one error type the core packages return. Op names the
// operation ("Alloc"), Kind classifies the failure, Code is the
// driver's result (a cudaapi.Result) when Kind is KindDriver, Detail carries
// the numbers involved, Fix tells the caller what to do about it, and Err is
// the underlying cause, if any. Its message reads "vyrecuda: op: kind:
// detail (driver code): cause. Fix: sentence", with exactly one Fix
// sentence. errors.Is(err, ErrBudget) (and each other sentinel) matches
// every Error of that Kind.
type Error = errs.Error

// Kind classifies an Error so callers can branch with errors.Is on the
// sentinels below instead of matching message text.
type Kind = errs.Kind

// The kinds of failure a Backend reports.
const (
	KindInvalidArgument = errs.KindInvalidArgument // bad input: zero or negative sizes, ranges, lengths
	KindBudget          = errs.KindBudget          // the request does not fit the byte budget
	KindUnknownHandle   = errs.KindUnknownHandle   // unknown, foreign, freed or drifted handle
	KindInFlight        = errs.KindInFlight        // the resource is bound to unfinished work
	KindDriver          = errs.KindDriver          // the driver returned a failure (Code holds it)
	KindUnsupported     = errs.KindUnsupported     // the driver or device lacks the capability
	KindClosed          = errs.KindClosed          // the Backend (or object) is closed
	KindOwned           = errs.KindOwned           // the buffer belongs to an OptimizerDispatcher: free it through the dispatcher
)

// Sentinels for errors.Is, one per Kind: errors.Is(err, ErrBudget) holds
// for every Error of Kind KindBudget.
var (
	ErrInvalidArgument = errs.ErrInvalidArgument // KindInvalidArgument
	ErrBudget          = errs.ErrBudget          // KindBudget
	ErrUnknownHandle   = errs.ErrUnknownHandle   // KindUnknownHandle
	ErrInFlight        = errs.ErrInFlight        // KindInFlight
	ErrDriver          = errs.ErrDriver          // KindDriver
	ErrUnsupported     = errs.ErrUnsupported     // KindUnsupported
	ErrClosed          = errs.ErrClosed          // KindClosed
	ErrOwned           = errs.ErrOwned           // KindOwned
)

// The real driver (package core/cuda).

// DeviceSummary describes one visible CUDA device, for listing before
// choosing an ordinal for OpenCUDA: cuda.DeviceSummary.
type DeviceSummary = cuda.DeviceSummary

// The Driver seam (package core/driver).

// Driver is the narrow device seam a Backend is built on: driver.Driver.
type Driver = driver.Driver

// DeviceInfo describes the device a Driver talks to: driver.DeviceInfo.
type DeviceInfo = driver.DeviceInfo

// Stream is a driver stream handle: driver.Stream.
type Stream = driver.Stream

// Event is a driver event handle: driver.Event.
type Event = driver.Event

// Module is a loaded code module handle: driver.Module.
type Module = driver.Module

// Function is a kernel entry point inside a Module: driver.Function.
type Function = driver.Function

// LaunchConfig is the geometry of one kernel launch: driver.LaunchConfig.
type LaunchConfig = driver.LaunchConfig

// KernelArg is one kernel parameter, a device pointer or a scalar:
// driver.KernelArg.
type KernelArg = driver.KernelArg

// KernelMemory gives a host kernel access to simulated device memory:
// driver.KernelMemory.
type KernelMemory = driver.KernelMemory

// HostKernel is the Go twin of a device kernel: driver.HostKernel.
type HostKernel = driver.HostKernel

// HostKernelBinder is the optional capability of running a Go twin in
// place of a kernel: driver.HostKernelBinder.
type HostKernelBinder = driver.HostKernelBinder

// PageableCopier is the optional capability of synchronous copies from and
// to pageable host memory: driver.PageableCopier.
type PageableCopier = driver.PageableCopier

// Launch is one kernel launch of a batch handed to a BatchLauncher:
// driver.Launch.
type Launch = driver.Launch

// BatchLauncher is the optional capability of queueing many launches in
// one call: driver.BatchLauncher.
type BatchLauncher = driver.BatchLauncher

// DeviceGraph is a driver graph handle: driver.DeviceGraph.
type DeviceGraph = driver.DeviceGraph

// GraphExec is an executable graph handle: driver.GraphExec.
type GraphExec = driver.GraphExec

// GraphDriver is the optional capability of stream capture and graph
// launch: driver.GraphDriver.
type GraphDriver = driver.GraphDriver

// GraphUploader is the optional capability of uploading an executable
// graph before its first launch: driver.GraphUploader.
type GraphUploader = driver.GraphUploader

// Capabilities says which optional driver features a Backend's device
// offers: driver.Capabilities.
type Capabilities = driver.Capabilities

// FeatureState is one optional feature and whether it is offered:
// driver.FeatureState.
type FeatureState = driver.FeatureState

// CapabilityReporter is the optional capability of reporting Capabilities:
// driver.CapabilityReporter.
type CapabilityReporter = driver.CapabilityReporter

// CacheNotifier is the optional capability of being told when memory goes
// into a Backend's caches and comes out again: driver.CacheNotifier.
type CacheNotifier = driver.CacheNotifier

// PeerLink says how one device reaches the memory of another:
// driver.PeerLink.
type PeerLink = driver.PeerLink

// The ways one device reaches another's memory (driver.PeerNone, ...).
const (
	PeerNone   = driver.PeerNone   // no direct access; copies are staged through pinned host memory
	PeerDirect = driver.PeerDirect // peer access can be enabled; copies go device to device
	PeerSame   = driver.PeerSame   // the same device and context; addresses are valid on both
)

// PeerDriver is the optional capability of working with other drivers of
// the same kind in one process: driver.PeerDriver.
type PeerDriver = driver.PeerDriver

// DataType is the element type of a collective operation: driver.DataType.
type DataType = driver.DataType

// The element types collectives work on (driver.DataInt8, ...).
const (
	DataInt8     = driver.DataInt8     // int8
	DataUint8    = driver.DataUint8    // uint8
	DataInt32    = driver.DataInt32    // int32
	DataUint32   = driver.DataUint32   // uint32
	DataInt64    = driver.DataInt64    // int64
	DataUint64   = driver.DataUint64   // uint64
	DataFloat16  = driver.DataFloat16  // IEEE half precision
	DataFloat32  = driver.DataFloat32  // float32
	DataFloat64  = driver.DataFloat64  // float64
	DataBFloat16 = driver.DataBFloat16 // bfloat16
)

// ReduceOp is the element-wise reduction of AllReduce and ReduceScatter:
// driver.ReduceOp.
type ReduceOp = driver.ReduceOp

// The reductions (driver.ReduceSum, ...).
const (
	ReduceSum  = driver.ReduceSum  // the sum
	ReduceProd = driver.ReduceProd // the product
	ReduceMax  = driver.ReduceMax  // the maximum
	ReduceMin  = driver.ReduceMin  // the minimum
	ReduceAvg  = driver.ReduceAvg  // the sum divided by the number of ranks
)

// CommID identifies one communicator that ranks in several processes join:
// driver.CommID.
type CommID = driver.CommID

// CollectiveDriver is the optional capability of collective communication
// among devices: driver.CollectiveDriver.
type CollectiveDriver = driver.CollectiveDriver

// Communicator is one rank's end of a collective communicator:
// driver.Communicator.
type Communicator = driver.Communicator

// ParamType is the C type of one kernel parameter of a Program declared with
// ProgramSpec.Params: driver.ParamType.
type ParamType = driver.ParamType

// The parameter types: a device pointer into a bound buffer, and every C
// scalar type (driver.ParamBuffer, ...). The zero ParamType is no type (an
// unset Arg).
const (
	ParamBuffer  = driver.ParamBuffer  // T* into a resident buffer, at an optional byte offset
	ParamInt8    = driver.ParamInt8    // int8_t / signed char
	ParamInt16   = driver.ParamInt16   // int16_t / short
	ParamInt32   = driver.ParamInt32   // int32_t / int
	ParamInt64   = driver.ParamInt64   // int64_t / long long
	ParamUint8   = driver.ParamUint8   // uint8_t / unsigned char
	ParamUint16  = driver.ParamUint16  // uint16_t / unsigned short
	ParamUint32  = driver.ParamUint32  // uint32_t / unsigned int
	ParamUint64  = driver.ParamUint64  // uint64_t / unsigned long long
	ParamFloat32 = driver.ParamFloat32 // float
	ParamFloat64 = driver.ParamFloat64 // double
)

// numParamTypes bounds the ParamType constants (argCtor checks against it).
const numParamTypes = ParamFloat64 + 1

// pdlMinCCMajor is the first compute capability whose devices honour
// programmatic stream serialization and griddepcontrol.
const pdlMinCCMajor = driver.ProgrammaticLaunchCCMajor

// The launch-resource pool's report (package core/internal/streams).

// LaunchKindCounts counts one kind of launch resource: how many sit idle in
// the pool (Idle), and how many the pool has created and destroyed over its
// life (Created, Destroyed). Created - Destroyed - Idle is the number leased
// out (or lost to a failed destroy, which is logged).
type LaunchKindCounts = streams.KindCounts

// LaunchResourceCounts reports a Backend's launch-resource pool per kind:
// non-blocking streams, completion events (timing disabled) and timing
// events (LaunchKindCounts each), plus the number of leases currently out
// (Leases) and, among them, the leases held because a failed call could
// not drain their stream (Quarantined): their work may still use staging,
// which is held with them until a retried synchronization succeeds
// (Backend.Close explains what happens then).
type LaunchResourceCounts = streams.Counts
