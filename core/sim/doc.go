// Package sim provides a simulated CUDA device: a pure-Go driver.Driver that
// needs no GPU. It is to package core what net/http/httptest is to net/http:
// the test double of the package above it. Import it to test your own GPU
// code, or a core.Backend, on any machine.
//
// The simulated device owns real bytes at fake device addresses and checks
// what a careless caller gets wrong on a real GPU without noticing:
//
//   - Device addresses are never 0, aligned to 256 and never reused, so
//     stale or freed pointers are caught. Copies and memsets must lie inside
//     one live allocation. Past Config.TotalMemory, MemAlloc fails with
//     CUDA_ERROR_OUT_OF_MEMORY.
//   - Streams are lazy: queued work runs only when its stream, or an event
//     recorded after it, is synchronized or queried (a query completes the
//     work and reports done, so results never depend on timing; HoldQueries
//     makes queries report queued work unfinished instead, as a GPU does
//     while long work runs, to exercise waits that give up). Reading a
//     host buffer before the fence shows the old bytes; reusing a staging
//     buffer too early uploads the wrong bytes. StreamWaitEvent orders work
//     across streams.
//   - Asynchronous copies need pinned (HostAlloc) or registered
//     (HostRegister) host memory unless Config.AllowPageable is set;
//     HostFree fills memory with PoisonByte before forgetting it.
//   - With Config.PoisonCache, device memory a Backend keeps in its caches
//     after a free (the driver.CacheNotifier capability) is poisoned and
//     refused to copies, memsets and kernels until it is handed out again,
//     so a use after free of pooled memory is caught.
//   - The legacy null stream (a zero driver.Stream) is refused everywhere.
//   - Misuse (double free, unknown handles, destroying a stream with queued
//     work, ...) fails with the CUDA result a driver would give and changes
//     nothing.
//   - Kernels are Go functions bound to module functions with BindHostKernel
//     (the driver.HostKernelBinder capability); they run when their launch
//     executes. With Capabilities.MappedPinnedHost (the default) they can
//     also read memory from HostAlloc at its host address, as kernels on a
//     GPU with unified addressing do.
//   - CUDA C++ given to core.Backend.Compile is not compiled (its Go twin
//     runs), but Compile, the stand-in for NVRTC, refuses an entry the
//     source does not define as a __global__ function, parameters whose
//     count or pointer/scalar kinds differ from the Program's, and
//     unbalanced brackets, with the error and log NVRTC gives.
//   - Faults are injected per operation (FailNth, NullNth, FailRate), every
//     call is counted (Calls, CallCounts), and Live reports live objects so a
//     test can prove nothing leaked (RequireNoLeaks). RequireNoLiveResident
//     catches a forgotten Free before Close frees it; CloseChecked
//     does both checks around Close. ClearFaults disarms faults that never
//     fired. A Backend plans its transfers for PlanProcs goroutines
//     (driver.PlanProcsReporter), not GOMAXPROCS, so the same program makes
//     the same calls, and a fault armed at the nth hits the same call, on
//     every machine.
//   - Events measure a deterministic simulated clock (see CopyOverhead).
//   - Graphs (the driver.GraphDriver capability): work queued on a capturing
//     stream is recorded into an operation list, and each GraphLaunch
//     queues that list again on the lazy stream, so a replay reads and
//     writes host memory as it is when the replay runs. Waiting on captured
//     work (synchronizing or querying a capturing stream, or an event
//     recorded inside a capture) fails with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture.
//     A collective queued on a capturing stream is recorded, as NCCL's
//     calls are: each launch of the graph is a new call of its
//     communicator, which meets the other ranks' next calls (eager or
//     launched from their graphs). Live counts graphs and executable
//     graphs.
//
// Errors are *Error values that unwrap to a cudaapi.Result, so
// errors.As(err, &res) and errors.Is(err, cudaapi.CUDA_ERROR_...) work as
// they do with the real driver.
//
// Several devices: NewMachine builds a Machine of simulated devices with a
// configurable peer-access matrix (MachineConfig.Peer) and link attributes
// (PeerNativeAtomics, PeerPerformanceRank: what PeerAttributes reports, as
// cuDeviceGetP2PAttribute does on a GPU). Its devices are
// core.PeerDrivers and core.CollectiveDrivers over each other: peer copies,
// waits on another device's events, portable pinned memory and collectives
// (all-reduce, broadcast, all-gather, reduce-scatter, computed in Go) work
// across them, with the same fault injection and call counting.
// RequireMachineNoLeaks checks every device, communicators included. A
// device from New is a Machine of one. Ranks joined from several goroutines
// (JoinCommunicator) wait for each other as NCCL's do: a synchronization
// waits for a rank that has not queued its part, a query reports it
// unfinished, an Abort of any rank ends the wait (the other ranks' parts
// fail), and JoinCommunicatorContext stops waiting for missing ranks when
// its context is done.
//
// A Device is safe for concurrent use; one mutex guards it (the devices of
// a Machine share one).
//
// A test of GPU code, in short:
//
//	dev := sim.New(sim.Config{TotalMemory: 64 << 20, PoisonCache: true})
//	b, err := core.Open(dev)
//	...
//	t.Cleanup(func() { sim.CloseChecked(t, b, dev) })
//	dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
//	_, err = b.Alloc(4096) // fails, and nothing leaks
//	dev.ClearFaults()                 // disarm what did not fire
//	...
package sim
