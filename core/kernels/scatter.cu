// vyrecuda built-in kernels for packed transfers: many small host<->device
// copies become one DMA of a packed staging buffer plus one launch.
//
// A table entry is three 64-bit words: {device address, offset in the packed
// buffer, byte length}. One block handles one entry (grid-stride over
// entries); its threads move 16-byte words when both sides are 16-byte aligned
// and the length is a multiple of 16, otherwise bytes.
#include <stdint.h>

__device__ static void move_bytes(uint8_t *dst, const uint8_t *src, uint64_t len)
{
    if ((((uintptr_t)dst | (uintptr_t)src | len) & 15) == 0) {
        uint4 *d = (uint4 *)dst;
        const uint4 *s = (const uint4 *)src;
        uint64_t words = len >> 4;
        for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) {
            d[i] = s[i];
        }
        return;
    }
    for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) {
        dst[i] = src[i];
    }
}

// vyre_scatter copies packed[offset .. offset+len) to each entry's device address.
extern "C" __global__ void vyre_scatter(const uint8_t *packed, const uint64_t *table, uint32_t count)
{
    for (uint32_t e = blockIdx.x; e < count; e += gridDim.x) {
        const uint64_t *t = table + 3 * (uint64_t)e;
        move_bytes((uint8_t *)t[0], packed + t[1], t[2]);
    }
}

// vyre_gather copies each entry's device bytes into packed[offset .. offset+len).
extern "C" __global__ void vyre_gather(uint8_t *packed, const uint64_t *table, uint32_t count)
{
    for (uint32_t e = blockIdx.x; e < count; e += gridDim.x) {
        const uint64_t *t = table + 3 * (uint64_t)e;
        move_bytes(packed + t[1], (const uint8_t *)t[0], t[2]);
    }
}
