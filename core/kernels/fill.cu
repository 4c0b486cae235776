// vyrecuda built-in kernel: set n 32-bit words of dst to value.
// Parameters: dst, n, value. Grid-stride loop, so any grid covers any n.
#include <stdint.h>

extern "C" __global__ void vyre_fill_u32(uint32_t *dst, uint32_t n, uint32_t value)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // compute_90 build (fill_sm90.ptx): programmatic dependent launch. Let
    // the next kernel on the stream be scheduled now, then wait until the
    // grids this one depends on have completed and their writes are visible,
    // before the first access to global memory.
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dst[i] = value;
    }
}
