// vyrecuda built-in kernel: out[i] = x[i] * factor on n 32-bit floats.
// Parameters: x, out, n, factor_bits (the IEEE-754 bits of the float factor,
// since scalar parameters travel as u32). Multiplication is a single rounded
// fmul (no fused multiply-add), so a Go float32 multiply gives the same bits.
#include <stdint.h>

extern "C" __global__ void vyre_scale_f32(const float *x, float *out, uint32_t n, uint32_t factor_bits)
{
    float factor = __uint_as_float(factor_bits);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = __fmul_rn(x[i], factor);
    }
}
