/*
 * nccl_fixture.h: a miniature collective-library header written by the
 * vyrecuda project for the generator's NCCL golden test. Like the real one it
 * includes a CUDA runtime header the generator does not have (the library's
 * prelude replaces it), returns an enum status, passes a 128-byte struct by
 * value and by pointer, takes arrays with a shared count, device buffers as
 * void pointers, opaque communicator and stream handles, and enum arguments.
 */
#ifndef VYRE_NCCL_FIXTURE_H
#define VYRE_NCCL_FIXTURE_H

#include <cuda_runtime.h>

#define NCCL_VERSION_CODE 22001

typedef struct ncclComm *ncclComm_t;

typedef struct {
	char internal[128];
} ncclUniqueId;

typedef enum {
	ncclSuccess = 0,
	ncclInvalidArgument = 4,
	ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;

typedef enum { ncclInt8 = 0, ncclChar = 0, ncclFloat32 = 7 } ncclDataType_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
	ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);

#endif
