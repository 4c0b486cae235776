/*
 * nvrtc_fixture.h: a miniature header in the shape of a runtime-compiler API,
 * written by the vyrecuda project for the generator's golden tests. It has a
 * status enum, an opaque program handle, C string arrays, caller-sized
 * buffers, an out-parameter string, and a function returning something other
 * than the status type. It lacks the newer entry points (cubin output, the
 * architecture list), which the generator builds from their protos. It
 * includes no system header.
 */
#ifndef VYRE_NVRTC_FIXTURE_H
#define VYRE_NVRTC_FIXTURE_H

#ifndef __x86_64
#define __x86_64 1
#endif
#ifndef __LP64__
#define __LP64__ 1
#endif

typedef __SIZE_TYPE__ size_t;

typedef enum {
  NVRTC_SUCCESS = 0,
  NVRTC_ERROR_OUT_OF_MEMORY = 1,
  NVRTC_ERROR_COMPILATION = 6,
  NVRTC_ERROR_COMPILATION_ALIAS = 6
} nvrtcResult;

typedef struct VyreProgram *nvrtcProgram;

const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char * const *headers,
                               const char * const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char * const name_expression);
nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression,
                                const char **lowered_name);

#endif
