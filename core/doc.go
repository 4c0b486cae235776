// Package core keeps byte buffers resident in NVIDIA GPU memory and moves
// data between host and device with as few copies and synchronizations as
// the hardware allows.
//
// # Where to begin
//
// Open a Backend on a device: OpenCUDA(0) on a GPU, or Open(sim.New(sim.Config{}))
// on the simulated device of package core/sim, which needs no GPU and is the
// one to use in tests. A Backend is safe for use by many goroutines.
//
// Alloc reserves device memory and returns a Buffer, a handle that stays
// resident until Free. Upload writes host bytes into buffers, each UploadAt
// naming its buffer and offset; however many pieces a call carries, it
// synchronizes once.
//
// Dispatch runs a Program over buffers: a built-in (ProgramFillU32,
// ProgramCopyU32, ProgramVAddU32, ProgramScaleF32), your own PTX with
// NewProgram, or CUDA C++ compiled at run time with Backend.Compile. Run
// executes a whole Batch (clears, fills, uploads, kernel steps in order,
// reads) with one fence; DispatchAsync and RunAsync return a Pending to
// collect later.
//
// Download reads a Range (Buffer.All, Buffer.Slice) into the storage of dst
// when it fits, append-style; DownloadMany reads many ranges with one fence.
// AllocSlice, UploadSlice and DownloadSlice do the same with typed slices.
//
// Free gives a buffer back; it is refused (ErrInFlight) while queued work
// still uses the buffer. Close releases everything the Backend holds. The
// package example does all of this, from Open to Close.
//
// # Errors
//
// Every failure is an *Error naming the call, with a Kind to match with
// errors.Is (ErrInvalidArgument, ErrBudget, ErrUnknownHandle, ErrInFlight,
// ErrDriver, ErrUnsupported, ErrClosed, ErrOwned), the numbers involved, and
// one sentence starting "Fix:". Bad input never panics and never changes
// state, and a failed call leaves the caller's outputs as they were; the one
// exception, bytes of a readback that reach the caller before the device
// fails, is documented on the calls and ruled out by WithAtomicReadbacks.
//
// # Going further
//
// Capture records a Batch into a CUDA Graph that replays with one launch.
// OptimizerDispatcher pools buffers by exact length and caches immutable
// uploads by content. AllocHostPinned and PinHostBuffer give transfers memory
// the device reads and writes directly. MemoryStats, Trim and Telemetry show
// what the Backend holds and moved. OpenDevices, CopyPeer and the Group's
// collectives span several GPUs. Options (With...) tune budgets, pools and
// the transfer planner.
//
// The repository's docs/ folder explains each of these for users;
// docs/ARCHITECTURE.md describes the packages under core and the path of a
// transfer through them.
package core
