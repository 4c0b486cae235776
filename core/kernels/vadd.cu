// vyrecuda built-in kernel: out[i] = a[i] + b[i] on n unsigned 32-bit words
// (wrapping, as unsigned arithmetic does). Parameters: a, b, out, n.
#include <stdint.h>

extern "C" __global__ void vyre_vadd_u32(const uint32_t *a, const uint32_t *b, uint32_t *out, uint32_t n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // compute_90 build (vadd_sm90.ptx): programmatic dependent launch. Let
    // the next kernel on the stream be scheduled now, then wait until the
    // grids this one depends on have completed and their writes are visible,
    // before the first access to global memory.
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = a[i] + b[i];
    }
}
