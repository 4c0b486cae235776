package core

import (
	"github.com/vyre-go/vyrecuda/core/cuda"
)

// OpenCUDA opens a Backend on the CUDA device with the given ordinal, through
// the driver API (libcuda, loaded at run time). The Backend retains the
// device's primary context and releases it when it is closed. Without an
// NVIDIA driver it returns an error matching cudaapi.ErrDriverNotFound.
func OpenCUDA(ordinal int, opts ...Option) (*Backend, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	drv, err := cuda.New(ordinal, cuda.WithLogger(cfg.log))
	if err != nil {
		return nil, withOp("OpenCUDA", err)
	}
	b, err := Open(drv, opts...)
	if err != nil {
		if cerr := drv.Close(); cerr != nil {
			cfg.log.Error("releasing the CUDA context after a failed Open failed", "err", cerr)
		}
		return nil, err
	}
	return b, nil
}

// NewCUDADriver returns the real Driver for the CUDA device with the given
// ordinal, holding a retained primary context (cuda.New). Most callers want
// OpenCUDA; this exists for building a Backend (or a conformance run) over
// the raw driver. The returned Driver also implements io.Closer: Close
// releases the context, and a Backend built over it with Open closes it in
// its own Close.
func NewCUDADriver(ordinal int) (Driver, error) {
	d, err := cuda.New(ordinal)
	if err != nil {
		return nil, withOp("NewCUDADriver", err)
	}
	return d, nil
}

// Devices lists the visible CUDA devices in ordinal order (cuda.Devices).
// It creates no context. Without an NVIDIA driver it returns an error
// matching cudaapi.ErrDriverNotFound; with a driver but no device, an error
// with Code CUDA_ERROR_NO_DEVICE.
func Devices() ([]DeviceSummary, error) {
	ds, err := cuda.Devices()
	if err != nil {
		return nil, withOp("Devices", err)
	}
	return ds, nil
}

// initDriver loads and initializes the CUDA driver and returns the number
// of visible devices; op names the caller in its error.
func initDriver(op string) (int, error) {
	n, err := cuda.Count()
	if err != nil {
		return 0, withOp(op, err)
	}
	return n, nil
}
