/*
 * fixture.h: a miniature header in the shape of a GPU driver API, written by
 * the vyrecuda project for the generator's golden tests. It exercises what
 * the generator must cope with in a real driver header: a calling-convention
 * macro, versioned-name remaps, a per-thread-stream remap macro, an enum
 * typedef for status codes, opaque handles, a struct argument, a
 * function-pointer argument, and an entry point whose newer version it lacks. It includes no system header.
 */
#ifndef VYRE_FIXTURE_H
#define VYRE_FIXTURE_H

/* Pin the 64-bit data model so the golden output is the same on every host. */
#ifndef __x86_64
#define __x86_64 1
#endif
#ifndef __LP64__
#define __LP64__ 1
#endif

#define CUDA_VERSION 12345

#if defined(_WIN32)
#define CUDAAPI __stdcall
#else
#define CUDAAPI
#endif

#if defined(VYRE_FIXTURE_PER_THREAD)
#define VYRE_PTSZ(name) name##_ptsz
#else
#define VYRE_PTSZ(name) name
#endif

#define cuMemAlloc         cuMemAlloc_v2
#define cuMemcpyHtoDAsync  VYRE_PTSZ(cuMemcpyHtoDAsync_v2)
#define cuGraphInstantiate cuGraphInstantiateWithFlags

typedef __SIZE_TYPE__ size_t;

#if defined(__x86_64) || defined(__LP64__)
typedef unsigned long long CUdeviceptr_v2;
#else
typedef unsigned int CUdeviceptr_v2;
#endif
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;

typedef struct VyreContext *CUcontext;
typedef struct VyreStream *CUstream;
typedef struct VyreEvent *CUevent;
typedef struct VyreModule *CUmodule;
typedef struct VyreFunction *CUfunction;
typedef struct VyreGraph *CUgraph;
typedef struct VyreGraphExec *CUgraphExec;
typedef struct VyreGraphNode *CUgraphNode;

typedef enum vyreStatus_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_READY_ALIAS = 600,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum vyreAttr_enum {
    CU_DEVICE_ATTRIBUTE_FIRST = 1,
    CU_DEVICE_ATTRIBUTE_SECOND,
    CU_DEVICE_ATTRIBUTE_SHIFTED = 1 << 4
} CUdevice_attribute;

typedef enum vyreEventFlags_enum {
    CU_EVENT_DEFAULT = 0,
    CU_EVENT_DISABLE_TIMING = 0x2
} CUevent_flags;

#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_PORTABLE 0x01U

typedef struct VyreLaunchConfig {
    unsigned int grid[3];
    unsigned int block[3];
} CUlaunchConfigFixture;

typedef void (CUDAAPI *CUhostFn)(void *userData);

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);
CUresult CUDAAPI cuCtxSynchronize(void);
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                    size_t *failIdx, CUstream hStream);
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult CUDAAPI cuLaunchWithConfig(CUfunction f, const CUlaunchConfigFixture *config, void **kernelParams);
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, size_t numDependencies);

#endif
