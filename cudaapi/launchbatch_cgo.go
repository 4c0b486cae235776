//go:build cgo

package cudaapi

/*
#include <stdint.h>

#define VYRE_MAX_PARAMS 1024

// vyre_launch_rec mirrors launchRecord.
typedef struct {
	uintptr_t f;
	uintptr_t stream;
	unsigned int grid[3];
	unsigned int block[3];
	unsigned int shmem;
	unsigned int nparams;
} vyre_launch_rec;

typedef int (*vyre_launch_kernel_fn)(void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, void*, void**, void**);

// vyre_launch_batch calls cuLaunchKernel (fn) for each record in order,
// pointing each launch's kernelParams at its run of 8-byte values. It returns
// the failing result in the low 32 bits and the index of the launch that
// failed (or n) in the high 32 bits, so no Go pointer is passed for an out
// parameter. The pointer array lives on this stack: the driver copies the
// parameters before cuLaunchKernel returns.
static uint64_t vyre_launch_batch(uintptr_t fn, const vyre_launch_rec *recs, int n, uint64_t *vals) {
	void *ptrs[VYRE_MAX_PARAMS];
	for (int i = 0; i < n; i++) {
		const vyre_launch_rec *r = &recs[i];
		for (unsigned int j = 0; j < r->nparams; j++) {
			ptrs[j] = &vals[j];
		}
		int rc = ((vyre_launch_kernel_fn)fn)((void*)r->f, r->grid[0], r->grid[1], r->grid[2],
			r->block[0], r->block[1], r->block[2], r->shmem, (void*)r->stream,
			r->nparams ? ptrs : (void**)0, (void**)0);
		vals += r->nparams;
		if (rc != 0) {
			return ((uint64_t)(unsigned int)i << 32) | (uint64_t)(unsigned int)rc;
		}
	}
	return (uint64_t)(unsigned int)n << 32;
}
*/
import "C"

import "unsafe"

// The C helper's stack array must hold MaxKernelParams pointers; this fails
// to compile when VYRE_MAX_PARAMS is smaller.
const _ = uint(C.VYRE_MAX_PARAMS - MaxKernelParams)

// launchRecord must match vyre_launch_rec field for field; these fail to
// compile (a negative constant converted to uint) when they drift apart.
const (
	_ = uint(unsafe.Sizeof(C.vyre_launch_rec{}) - unsafe.Sizeof(launchRecord{}))
	_ = uint(unsafe.Sizeof(launchRecord{}) - unsafe.Sizeof(C.vyre_launch_rec{}))
	_ = uint(unsafe.Offsetof(C.vyre_launch_rec{}.shmem) - unsafe.Offsetof(launchRecord{}.sharedMem))
	_ = uint(unsafe.Offsetof(launchRecord{}.sharedMem) - unsafe.Offsetof(C.vyre_launch_rec{}.shmem))
	_ = uint(unsafe.Offsetof(C.vyre_launch_rec{}.grid) - unsafe.Offsetof(launchRecord{}.grid))
	_ = uint(unsafe.Offsetof(launchRecord{}.grid) - unsafe.Offsetof(C.vyre_launch_rec{}.grid))
)

// launchBatch runs the C loop over n records at recs with their values at vals.
func launchBatch(recs, vals unsafe.Pointer, n int) (int, error) {
	fn, err := procLaunchKernel.Find()
	if err != nil {
		return 0, err
	}
	out := uint64(C.vyre_launch_batch(C.uintptr_t(fn), (*C.vyre_launch_rec)(recs), C.int(n), (*C.uint64_t)(vals)))
	if r := Result(int32(uint32(out))); r != CUDA_SUCCESS {
		return int(out >> 32), r
	}
	return n, nil
}
