package cudaapi

import (
	"errors"
	"strconv"
)

// BOOTSTRAP: hand-written stand-in until gen/ emits zresult.go from cuda.h.
// The bindings work deletes this file when the generated Result lands.

// Result is a CUresult: the status code every driver API call returns.
type Result int32

// A few CUresult values, named as in cuda.h.
const (
	CUDA_SUCCESS                              Result = 0
	CUDA_ERROR_INVALID_VALUE                  Result = 1
	CUDA_ERROR_OUT_OF_MEMORY                  Result = 2
	CUDA_ERROR_NOT_INITIALIZED                Result = 3
	CUDA_ERROR_INVALID_HANDLE                 Result = 400
	CUDA_ERROR_NOT_FOUND                      Result = 500
	CUDA_ERROR_NOT_READY                      Result = 600
	CUDA_ERROR_ILLEGAL_ADDRESS                Result = 700
	CUDA_ERROR_LAUNCH_FAILED                  Result = 719
	CUDA_ERROR_UNKNOWN                        Result = 999
	CUDA_ERROR_DEINITIALIZED                  Result = 4
	CUDA_ERROR_NO_DEVICE                      Result = 100
	CUDA_ERROR_INVALID_DEVICE                 Result = 101
	CUDA_ERROR_INVALID_IMAGE                  Result = 200
	CUDA_ERROR_INVALID_CONTEXT                Result = 201
	CUDA_ERROR_INVALID_PTX                    Result = 218
	CUDA_ERROR_ILLEGAL_STATE                  Result = 401
	CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES        Result = 701
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED Result = 712
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     Result = 713
	CUDA_ERROR_NOT_PERMITTED                  Result = 800
	CUDA_ERROR_NOT_SUPPORTED                  Result = 801
)

// Error returns the result's name.
func (r Result) Error() string { return "CUresult " + strconv.Itoa(int(r)) }

// ErrDriverNotFound is returned when libcuda cannot be loaded.
var ErrDriverNotFound = errors.New("cudaapi: CUDA driver library not found")
