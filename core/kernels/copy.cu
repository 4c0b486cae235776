// vyrecuda built-in kernel: copy n 32-bit words from src to dst.
// Parameters: src, dst, n. Grid-stride loop, so any grid covers any n.
#include <stdint.h>

extern "C" __global__ void vyre_copy_u32(const uint32_t *src, uint32_t *dst, uint32_t n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // compute_90 build (copy_sm90.ptx): programmatic dependent launch. Let
    // the next kernel on the stream be scheduled now, then wait until the
    // grids this one depends on have completed and their writes are visible,
    // before the first access to global memory.
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}
