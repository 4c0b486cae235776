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
	unsigned int flags;
} vyre_launch_rec;

#define VYRE_LAUNCH_PROGRAMMATIC 1u

// vyre_launch_attr and vyre_launch_config have the layout of the driver
// API's CUlaunchAttribute (a 4-byte id, 4 bytes of padding, then a 64-byte
// value union aligned to 8) and CUlaunchConfig (grid, block and shared
// memory sizes, the stream, the attribute array and its length), the same
// from CUDA 11.8 to 13.0. Programmatic stream serialization reads an int at
// the start of the value.
typedef struct {
	int id;
	unsigned int pad;
	union {
		int i;
		unsigned long long align;
		char bytes[64];
	} value;
} vyre_launch_attr;

typedef struct {
	unsigned int grid[3];
	unsigned int block[3];
	unsigned int shmem;
	uintptr_t stream;
	vyre_launch_attr *attrs;
	unsigned int nattrs;
} vyre_launch_config;

typedef int (*vyre_launch_kernel_fn)(void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, void*, void**, void**);
typedef int (*vyre_launch_kernel_ex_fn)(const vyre_launch_config*, void*, void**, void**);

// vyre_launch_batch calls cuLaunchKernel (fn) for each record in order,
// pointing each launch's kernelParams at its run of 8-byte values; a record
// flagged programmatic goes through cuLaunchKernelEx (fnex, when not 0)
// with attribute attr (programmatic stream serialization) set to 1. It
// returns the failing result in the low 32 bits and the index of the launch
// that failed (or n) in the high 32 bits, so no Go pointer is passed for an
// out parameter. The pointer array and the launch configuration live on
// this stack: the driver copies both before the launch call returns.
static uint64_t vyre_launch_batch(uintptr_t fn, uintptr_t fnex, int attr, const vyre_launch_rec *recs, int n, uint64_t *vals) {
	void *ptrs[VYRE_MAX_PARAMS];
	vyre_launch_attr pdl = {0};
	pdl.id = attr;
	pdl.value.i = 1;
	vyre_launch_config cfg = {0};
	for (int i = 0; i < n; i++) {
		const vyre_launch_rec *r = &recs[i];
		for (unsigned int j = 0; j < r->nparams; j++) {
			ptrs[j] = &vals[j];
		}
		void **kp = r->nparams ? ptrs : (void**)0;
		int rc;
		if (fnex != 0 && (r->flags & VYRE_LAUNCH_PROGRAMMATIC)) {
			for (int k = 0; k < 3; k++) {
				cfg.grid[k] = r->grid[k];
				cfg.block[k] = r->block[k];
			}
			cfg.shmem = r->shmem;
			cfg.stream = r->stream;
			cfg.attrs = &pdl;
			cfg.nattrs = 1;
			rc = ((vyre_launch_kernel_ex_fn)fnex)(&cfg, (void*)r->f, kp, (void**)0);
		} else {
			rc = ((vyre_launch_kernel_fn)fn)((void*)r->f, r->grid[0], r->grid[1], r->grid[2],
				r->block[0], r->block[1], r->block[2], r->shmem, (void*)r->stream, kp, (void**)0);
		}
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
	_ = uint(unsafe.Offsetof(C.vyre_launch_rec{}.flags) - unsafe.Offsetof(launchRecord{}.flags))
	_ = uint(unsafe.Offsetof(launchRecord{}.flags) - unsafe.Offsetof(C.vyre_launch_rec{}.flags))
	_ = uint(C.VYRE_LAUNCH_PROGRAMMATIC - launchProgrammatic)
	_ = uint(launchProgrammatic - C.VYRE_LAUNCH_PROGRAMMATIC)
)

// The configuration mirror must have CUlaunchConfig's size (56 bytes on a
// 64-bit host) and the attribute CUlaunchAttribute's (72), with the value
// union at offset 8.
const (
	_ = uint(unsafe.Sizeof(C.vyre_launch_config{}) - 56)
	_ = uint(56 - unsafe.Sizeof(C.vyre_launch_config{}))
	_ = uint(unsafe.Sizeof(C.vyre_launch_attr{}) - 72)
	_ = uint(72 - unsafe.Sizeof(C.vyre_launch_attr{}))
	_ = uint(unsafe.Offsetof(C.vyre_launch_attr{}.value) - 8)
	_ = uint(8 - unsafe.Offsetof(C.vyre_launch_attr{}.value))
)

// launchBatch runs the C loop over n records at recs with their values at
// vals. With programmatic set (some record is flagged), it looks up
// cuLaunchKernelEx; when the driver lacks it, flagged records are queued
// through cuLaunchKernel like the others.
func launchBatch(recs, vals unsafe.Pointer, n int, programmatic bool) (int, error) {
	fn, err := procLaunchKernel.Find()
	if err != nil {
		return 0, err
	}
	var fnex uintptr
	if programmatic {
		if p, err := procLaunchKernelEx.Find(); err == nil {
			fnex = p
		}
	}
	out := uint64(C.vyre_launch_batch(C.uintptr_t(fn), C.uintptr_t(fnex), C.int(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION),
		(*C.vyre_launch_rec)(recs), C.int(n), (*C.uint64_t)(vals)))
	if r := Result(int32(uint32(out))); r != CUDA_SUCCESS {
		return int(out >> 32), r
	}
	return n, nil
}
