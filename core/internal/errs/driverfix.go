package errs

import "github.com/vyre-go/vyrecuda/cudaapi"

// Fix sentences for driver results, one per class of failure. driverFix
// picks the class; a result it does not know gets fixDriverOther.
const (
	fixOutOfMemory = "free device memory (unused resident buffers, other processes on the GPU) or request less, then retry"
	fixLaunch      = "the kernel failed while it ran: check its arguments, grid and the buffer lengths it assumes (on the simulated device, its Go twin returned the error above or panicked); on a GPU the context is unusable afterwards, so close the Backend and open a new one"
	fixIllegalAddr = "a kernel or copy touched memory outside a live allocation: run it under compute-sanitizer, or on core/sim with Config.PoisonCache, to find the access; on a GPU the context is unusable afterwards, so close the Backend and open a new one"
	fixResources   = "the launch asks for more threads, registers or shared memory than the device has: use a smaller block or less shared memory"
	fixNotFound    = "check that Entry names a kernel in the image (PTX: \".entry name\"; CUDA C++: declare the kernel extern \"C\" so its name is not mangled)"
	fixImage       = "the code image does not load on this device: build PTX or a cubin for its compute capability, with a PTX ISA version its driver can compile"
	fixInvalid     = "a value passed to the driver is out of range (a size, offset, pointer or launch dimension): check the numbers in the detail; if they came from vyrecuda itself, report it as a bug"
	fixHandle      = "a stream, event, module or function handle is stale or belongs to another context: use handles only with the Backend that created them, and not after Close"
	fixNoDevice    = "check that the NVIDIA driver is installed and loaded and that a GPU is visible to this process (nvidia-smi, CUDA_VISIBLE_DEVICES), or use core/sim"
	fixUnsupported = "this device or driver lacks the feature: upgrade the driver, or use a path that does not need it"
	fixPinned      = "register each host range once, and unregister only what was registered (PinHostBuffer / UnpinHostBuffer)"
	fixHardware    = "the GPU reported a hardware or system fault: check nvidia-smi and the kernel log; the GPU may need a reset"
	fixTimeout     = "the device did not finish in time: check for a kernel that never ends, or a display watchdog limiting kernel run time"
	fixState       = "the driver refused the call in the current state (an operation not permitted, or a stream being captured): finish or abort what holds that state first"
	fixDriverOther = "check the driver result in the message and the device state (nvidia-smi); retry once the cause is resolved"
)

// Results that older cuda.h headers lack. Result codes are fixed numbers of
// the driver's ABI, so they are spelled here rather than taken from the
// generated bindings, which hold only what the header they came from names.
const (
	resultCallRequiresNewerDriver cudaapi.Result = 36  // CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER: not in the 12.5 header
	resultContained               cudaapi.Result = 226 // CUDA_ERROR_CONTAINED: not in the 12.5 header
	resultFunctionNotLoaded       cudaapi.Result = 913 // CUDA_ERROR_FUNCTION_NOT_LOADED: not in the 11.8 header
)

// driverFix returns the Fix sentence for a driver result.
func driverFix(code cudaapi.Result) string {
	switch code {
	case cudaapi.CUDA_ERROR_OUT_OF_MEMORY:
		return fixOutOfMemory
	case cudaapi.CUDA_ERROR_LAUNCH_FAILED, cudaapi.CUDA_ERROR_ASSERT, cudaapi.CUDA_ERROR_ILLEGAL_INSTRUCTION,
		cudaapi.CUDA_ERROR_INVALID_PC, cudaapi.CUDA_ERROR_HARDWARE_STACK_ERROR:
		return fixLaunch
	case cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, cudaapi.CUDA_ERROR_MISALIGNED_ADDRESS, cudaapi.CUDA_ERROR_INVALID_ADDRESS_SPACE:
		return fixIllegalAddr
	case cudaapi.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaapi.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, cudaapi.CUDA_ERROR_INVALID_CLUSTER_SIZE:
		return fixResources
	case cudaapi.CUDA_ERROR_NOT_FOUND, cudaapi.CUDA_ERROR_FILE_NOT_FOUND:
		return fixNotFound
	case cudaapi.CUDA_ERROR_INVALID_IMAGE, cudaapi.CUDA_ERROR_INVALID_PTX, cudaapi.CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
		cudaapi.CUDA_ERROR_NO_BINARY_FOR_GPU, cudaapi.CUDA_ERROR_INVALID_SOURCE, cudaapi.CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
		cudaapi.CUDA_ERROR_JIT_COMPILATION_DISABLED, cudaapi.CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
		cudaapi.CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
		return fixImage
	case cudaapi.CUDA_ERROR_INVALID_VALUE:
		return fixInvalid
	case cudaapi.CUDA_ERROR_INVALID_HANDLE, cudaapi.CUDA_ERROR_INVALID_CONTEXT, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED,
		resultFunctionNotLoaded:
		return fixHandle
	case cudaapi.CUDA_ERROR_NOT_INITIALIZED, cudaapi.CUDA_ERROR_DEINITIALIZED, cudaapi.CUDA_ERROR_NO_DEVICE,
		cudaapi.CUDA_ERROR_INVALID_DEVICE, cudaapi.CUDA_ERROR_STUB_LIBRARY, cudaapi.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
		cudaapi.CUDA_ERROR_DEVICE_UNAVAILABLE, cudaapi.CUDA_ERROR_DEVICE_NOT_LICENSED, cudaapi.CUDA_ERROR_SYSTEM_NOT_READY:
		return fixNoDevice
	case cudaapi.CUDA_ERROR_NOT_SUPPORTED, resultCallRequiresNewerDriver,
		cudaapi.CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, cudaapi.CUDA_ERROR_UNSUPPORTED_LIMIT:
		return fixUnsupported
	case cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return fixPinned
	case cudaapi.CUDA_ERROR_ECC_UNCORRECTABLE, cudaapi.CUDA_ERROR_NVLINK_UNCORRECTABLE, resultContained,
		cudaapi.CUDA_ERROR_OPERATING_SYSTEM:
		return fixHardware
	case cudaapi.CUDA_ERROR_LAUNCH_TIMEOUT, cudaapi.CUDA_ERROR_TIMEOUT:
		return fixTimeout
	case cudaapi.CUDA_ERROR_ILLEGAL_STATE, cudaapi.CUDA_ERROR_NOT_PERMITTED, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
		cudaapi.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaapi.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
		cudaapi.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
		return fixState
	}
	return fixDriverOther
}
