package cuda

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// DeviceSummary describes one visible CUDA device, for listing (vyrecuda
// info) before choosing an ordinal for New (or core.OpenCUDA).
type DeviceSummary struct {
	Ordinal     int
	Name        string // marketing name, e.g. "NVIDIA H200"
	TotalMemory uint64 // bytes of device memory
	CCMajor     int    // compute capability, major
	CCMinor     int    // compute capability, minor
	// DriverVersion is the installed driver's CUDA version as cuDriverGetVersion
	// reports it: 1000*major + 10*minor, e.g. 13000 for CUDA 13.0.
	DriverVersion int
	// Capabilities are the optional features the driver offers for this
	// device (a missing one is reported here, never as an error).
	Capabilities driver.Capabilities
}

// Devices lists the visible CUDA devices in ordinal order. It creates no
// context. Without an NVIDIA driver it returns an error matching
// cudaapi.ErrDriverNotFound; with a driver but no device, an error with
// Code CUDA_ERROR_NO_DEVICE.
func Devices() ([]DeviceSummary, error) {
	const op = "cuda.Devices"
	count, err := initDriver(op)
	if err != nil {
		return nil, err
	}
	out := make([]DeviceSummary, 0, count)
	for i := range count {
		s, err := describe(op, i)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// describe reads one device's summary; the driver must be initialized.
func describe(op string, ordinal int) (DeviceSummary, error) {
	s := DeviceSummary{Ordinal: ordinal}
	ver, err := cudaapi.DriverGetVersion()
	if err != nil {
		return s, openError(op, "cuDriverGetVersion", err)
	}
	s.DriverVersion = int(ver)
	dev, err := cudaapi.DeviceGet(int32(ordinal))
	if err != nil {
		return s, openError(op, fmt.Sprintf("cuDeviceGet(%d)", ordinal), err)
	}
	if s.Name, err = cudaapi.DeviceGetName(dev); err != nil {
		return s, openError(op, "cuDeviceGetName", err)
	}
	if s.TotalMemory, err = cudaapi.DeviceTotalMem(dev); err != nil {
		return s, openError(op, "cuDeviceTotalMem", err)
	}
	major, err := cudaapi.DeviceGetAttribute(cudaapi.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
	if err != nil {
		return s, openError(op, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", err)
	}
	minor, err := cudaapi.DeviceGetAttribute(cudaapi.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
	if err != nil {
		return s, openError(op, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", err)
	}
	s.CCMajor, s.CCMinor = int(major), int(minor)
	s.Capabilities = deviceCapabilities(dev)
	if s.TotalMemory == 0 {
		return s, errs.New(op, errs.KindDriver, fmt.Sprintf("device %d (%s) reports 0 bytes of memory", ordinal, s.Name),
			"check the device with nvidia-smi")
	}
	return s, nil
}
