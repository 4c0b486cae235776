package sim

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Error is what every failing Device call returns: the CUDA result code a
// real driver would give, plus the operation and a detail a test author can
// read. It unwraps to Code, so callers find the code with
// errors.As(err, &res) for a cudaapi.Result res, or test it with
// errors.Is(err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY), exactly as they would
// with the real driver, which returns a bare cudaapi.Result.
type Error struct {
	Op     Op             // the Device method that failed
	Code   cudaapi.Result // the CUDA result code
	Detail string         // what was wrong, with the numbers involved
}

// Error formats "sim: Op: code: detail".
func (e *Error) Error() string {
	return fmt.Sprintf("sim: %s: %s (CUresult %d): %s", e.Op, resultName(e.Code), int32(e.Code), e.Detail)
}

// Unwrap returns the CUDA result code.
func (e *Error) Unwrap() error { return e.Code }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func fail(op Op, code cudaapi.Result, format string, args ...any) *Error {
	return &Error{Op: op, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// resultName names the codes the simulated device produces; the bootstrap
// cudaapi.Result does not know its own names yet.
func resultName(r cudaapi.Result) string {
	switch r {
	case cudaapi.CUDA_SUCCESS:
		return "CUDA_SUCCESS"
	case cudaapi.CUDA_ERROR_INVALID_VALUE:
		return "CUDA_ERROR_INVALID_VALUE"
	case cudaapi.CUDA_ERROR_OUT_OF_MEMORY:
		return "CUDA_ERROR_OUT_OF_MEMORY"
	case cudaapi.CUDA_ERROR_INVALID_IMAGE:
		return "CUDA_ERROR_INVALID_IMAGE"
	case cudaapi.CUDA_ERROR_INVALID_HANDLE:
		return "CUDA_ERROR_INVALID_HANDLE"
	case cudaapi.CUDA_ERROR_ILLEGAL_STATE:
		return "CUDA_ERROR_ILLEGAL_STATE"
	case cudaapi.CUDA_ERROR_NOT_FOUND:
		return "CUDA_ERROR_NOT_FOUND"
	case cudaapi.CUDA_ERROR_NOT_READY:
		return "CUDA_ERROR_NOT_READY"
	case cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS:
		return "CUDA_ERROR_ILLEGAL_ADDRESS"
	case cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
	case cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
	case cudaapi.CUDA_ERROR_LAUNCH_FAILED:
		return "CUDA_ERROR_LAUNCH_FAILED"
	case cudaapi.CUDA_ERROR_NOT_SUPPORTED:
		return "CUDA_ERROR_NOT_SUPPORTED"
	case cudaapi.CUDA_ERROR_UNKNOWN:
		return "CUDA_ERROR_UNKNOWN"
	}
	return r.Error()
}
