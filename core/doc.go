// Package core keeps byte buffers resident in GPU memory and moves data
// between host and device with as few copies and synchronizations as the
// hardware allows.
//
// The package owns:
//
//   - the Driver seam (package core/driver, aliased here): the narrow set of
//     raw device operations a Backend needs, implemented over the CUDA
//     driver API and, for tests, by the simulated device in core/sim, plus
//     optional capabilities found by type assertion (HostKernelBinder,
//     BatchLauncher, CacheNotifier);
//   - the Backend (Open, Close): a resident buffer table, handles that are
//     unique across the process, and in-flight reference counts that keep
//     buffers alive while work uses them;
//   - device memory (memory.go, over the caching allocator in
//     internal/alloc): size classes that round by less than 1/8, a cache of
//     freed blocks served without driver calls, one budget over every device
//     byte held (9/10 of device memory, cached bytes counting as the
//     Backend's own), release-and-retry before a refusal, Trim, and
//     MemoryStats;
//   - the real driver (package core/cuda, opened by OpenCUDA, NewCUDADriver;
//     Devices): the Driver over cudaapi, holding the device's primary
//     context and making it current on whichever OS thread runs each call;
//   - uploads and readbacks of resident buffers, validated as a whole batch
//     before any byte moves, fused with package fusion, staged through pooled
//     pinned host memory and fenced with one stream synchronization per call;
//     each call is planned by package xferplan from its sizes and count: many
//     small copies travel packed (one DMA, or several overlapping the
//     packing, plus one scatter or gather launch of the built-in kernels in
//     core/kernels), single copies from 256 KiB are staged in chunks through
//     several pinned blocks so host copies (spread over goroutines) overlap
//     the DMA, and copies from or into memory pinned through the Backend move
//     directly (WithPlanTuning, WithPlanModel, WithCopyHelperLinger);
//   - programs and launches: Program (a PTX image, entry point, grid rule and
//     a Go twin for the simulated device), modules loaded once per Backend,
//     the built-in programs (ProgramFillU32, ProgramCopyU32, ProgramVAddU32,
//     ProgramScaleF32), DispatchResident and DispatchResidentAsync with
//     Pending results that hold their buffers in flight until they complete,
//     and Batch (clears, fills, uploads, steps, reads) run with one fence by
//     Run or RunAsync; on devices of compute capability 9.0 and newer a step
//     that follows another step's launch and waits on its grid dependencies
//     (the built-ins' sm_90 images, ProgramSpec.WaitsOnGridDependencies) is
//     launched with programmatic dependent launch (pdl.go,
//     WithProgrammaticLaunch);
//   - kernels from CUDA C++ at run time (Backend.Compile, through package
//     nvrtc and its disk cache), typed kernel parameters (ProgramSpec.Params,
//     DispatchConfig.Args), typed slices (AllocSlice, UploadSlice,
//     DownloadSlice) and context-aware waits (RunContext, AwaitContext,
//     AwaitIntoContext, Graph.ReplayContext);
//   - CUDA graphs (graph.go): Capture records a Batch once by stream capture
//     of Run's queueing path (through the optional GraphDriver capability)
//     and Graph.Replay runs it with one graph launch and one fence, reading
//     the upload slices' current bytes; a Graph holds its buffers in flight
//     and its pinned staging until Close, and is uploaded to the device at
//     Capture (GraphUploader);
//   - the optimizer dispatcher (NewOptimizerDispatcher): an exact-size free
//     pool of resident buffers addressed by id, and a content-addressed cache
//     of static uploads;
//   - pinned host memory for callers (AllocHostPinned, PinHostBuffer) and
//     asynchronous uploads from it (UploadResidentAsyncAt, SynchronizeUploads);
//   - the pools below all of that: pinned host staging blocks in
//     power-of-two buckets, and a launch-resource pool of non-blocking
//     streams and events;
//   - several devices: Group (OpenDevices, OpenGroup) opens one Backend per
//     device and closes them together; CopyPeer copies between resident
//     buffers of two Backends with one fence (device to device in one
//     context, peer copies with access enabled on first use, or staged
//     through pinned memory), through the optional PeerDriver capability;
//     collectives (Group.AllReduce, Broadcast, AllGather, ReduceScatter, and
//     Comm for ranks in several processes) run through the optional
//     CollectiveDriver capability, NCCL (package ncclapi) on real devices;
//   - one error type, *Error, with sentinels for errors.Is, and a Telemetry
//     snapshot of bytes, operations, copies and synchronizations.
//
// What it must not do: it never panics on caller input, never changes state
// when a call fails, never passes the legacy null stream to a driver, never
// accepts a null handle or pointer reported with success, and never leaks a
// driver object on any failure path. Budget, pooling, fusion and concurrency
// policy live here, above the Driver; a Driver only performs raw operations.
// One documented exception concerns bytes, not state: a readback that hands
// its bytes to the caller as they land may leave part of the caller's
// storage holding the device's bytes when the device fails mid-transfer
// (DownloadResidentInto, DownloadResidentManyInto); WithAtomicReadbacks
// rules that out.
//
// A Backend is safe for use by many goroutines at once.
//
// docs/ARCHITECTURE.md in the repository describes the layers and how
// uploads, readbacks and batches flow through them.
package core
