package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Sentinel-like results for the adapter's own refusals; errors.As finds the
// cudaapi.Result in each, as the Driver contract requires.
const (
	resultRefused = cudaapi.CUDA_ERROR_INVALID_VALUE
	resultNull    = cudaapi.CUDA_ERROR_INVALID_HANDLE
)

// openError classifies a failure while opening the driver: no library is
// KindUnsupported with the loader's error, a CUDA result is KindDriver.
func openError(op, call string, err error) *errs.Error {
	if errors.Is(err, cudaapi.ErrDriverNotFound) {
		// The loader's message ends with its own "Fix:" sentence; fold it into
		// this error's one Fix instead of printing two.
		fix, cause := splitFix(err)
		if fix == "" {
			// Without cgo every binding returns the bare sentinel.
			fix = "build with cgo (CGO_ENABLED=1, gcc) and install the NVIDIA driver; VYRECUDA_LIBCUDA selects the library path"
		}
		fix += "; "
		return &errs.Error{Op: op, Kind: errs.KindUnsupported, Detail: "the CUDA driver library could not be loaded", Err: cause,
			Fix: fix + "to run without a GPU, use the simulated device (core/sim) instead"}
	}
	e := &errs.Error{Op: op, Kind: errs.KindDriver, Detail: call + " failed", Err: err,
		Fix: "check that an NVIDIA GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and that the driver is working"}
	var r cudaapi.Result
	if errors.As(err, &r) {
		e.Code = r
		if r == cudaapi.CUDA_ERROR_NO_DEVICE {
			e.Detail = "no CUDA device is visible"
			e.Fix = "check nvidia-smi and CUDA_VISIBLE_DEVICES; use core/sim to run without a GPU"
		}
	}
	return e
}

// fixlessError carries an error's text without its trailing "Fix:" sentence
// and still unwraps to it, so errors.Is keeps working.
type fixlessError struct {
	msg string
	err error
}

func (e *fixlessError) Error() string { return e.msg }
func (e *fixlessError) Unwrap() error { return e.err }

// splitFix separates a "...; Fix: sentence" error message into the cause
// (as an error wrapping err) and the sentence.
func splitFix(err error) (string, error) {
	msg := err.Error()
	i := strings.Index(msg, "; Fix: ")
	if i < 0 {
		return "", err
	}
	return msg[i+len("; Fix: "):], &fixlessError{msg: msg[:i], err: err}
}

// callError names the driver entry point that failed, keeping its Result
// reachable through errors.As; a nil err stays nil.
func callError(call string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", call, err)
}

// refused reports a call the adapter rejects before reaching the driver.
func refused(call, detail, fix string) error {
	return &errs.Error{Op: call, Kind: errs.KindInvalidArgument, Code: resultRefused, Detail: detail, Fix: fix, Err: resultRefused}
}

// nullResult reports success with a null handle or pointer.
func nullResult(call string) error {
	return &errs.Error{Op: call, Kind: errs.KindDriver, Code: resultNull, Detail: "returned success with a null result",
		Fix: "the driver misbehaved; report it with the driver version, and retry the call", Err: resultNull}
}

func nullStream(call string) error {
	return refused(call, "the legacy null stream (0) was passed", "pass a stream from StreamCreate")
}

// nilDriver reports a call on a nil *Driver.
func nilDriver() error {
	return &errs.Error{Op: "cuda", Kind: errs.KindInvalidArgument, Code: resultNull, Err: resultNull,
		Detail: "the *cuda.Driver is nil", Fix: "open the driver with cuda.New (or a Backend with core.OpenCUDA)"}
}
