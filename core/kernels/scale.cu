// vyrecuda built-in kernel: out[i] = x[i] * factor on n 32-bit floats.
// Parameters: x, out, n, factor_bits (the IEEE-754 bits of the float factor,
// since scalar parameters travel as u32). Multiplication is a single rounded
// fmul (no fused multiply-add), so a Go float32 multiply gives the same bits.
#include <stdint.h>

extern "C" __global__ void vyre_scale_f32(const float *x, float *out, uint32_t n, uint32_t factor_bits)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // compute_90 build (scale_sm90.ptx): programmatic dependent launch. Let
    // the next kernel on the stream be scheduled now, then wait until the
    // grids this one depends on have completed and their writes are visible,
    // before the first access to global memory.
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
    float factor = __uint_as_float(factor_bits);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = __fmul_rn(x[i], factor);
    }
}
