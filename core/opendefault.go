package core

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// DeviceEnv is the environment variable that overrides the device
// OpenDefault and ChooseDevice pick: "cuda" (CUDA device 0), "cuda:N" (CUDA
// device N) or "sim" (the simulated device).
const DeviceEnv = "VYRECUDA_DEVICE"

// DeviceChoice is the device OpenDefault opens and why.
type DeviceChoice struct {
	// Sim is true for the simulated device (core/sim); otherwise the
	// choice is the CUDA device Ordinal.
	Sim     bool
	Ordinal int
	// Env is the value of VYRECUDA_DEVICE the choice follows, or "" when
	// the variable was unset or empty and the choice was made by probing.
	Env string
	// Reason says why, in a few words ("VYRECUDA_DEVICE=sim", "no CUDA
	// driver found", "the CUDA driver reports 2 devices").
	Reason string
}

// String names the device: "sim" or "cuda:N".
func (c DeviceChoice) String() string {
	if c.Sim {
		return "sim"
	}
	return "cuda:" + strconv.Itoa(c.Ordinal)
}

// ChooseDevice returns the device OpenDefault would open, without opening
// it: the one VYRECUDA_DEVICE names when it is set and not empty, else
// CUDA device 0 when a CUDA driver is found and reports at least one
// device, else the simulated device. Probing loads the driver and counts
// devices; it creates no context. A value of VYRECUDA_DEVICE other than
// "cuda", "cuda:N" (N >= 0) or "sim" is ErrInvalidArgument.
func ChooseDevice() (DeviceChoice, error) {
	const op = "ChooseDevice"
	if env := os.Getenv(DeviceEnv); env != "" {
		return parseDeviceEnv(op, env)
	}
	n, err := initDriver(op)
	switch {
	case errors.Is(err, cudaapi.ErrDriverNotFound):
		return DeviceChoice{Sim: true, Reason: "no CUDA driver found"}, nil
	case err != nil:
		var res cudaapi.Result
		if errors.As(err, &res) && res == cudaapi.CUDA_ERROR_NO_DEVICE {
			return DeviceChoice{Sim: true, Reason: "the CUDA driver found no device"}, nil
		}
		return DeviceChoice{Sim: true, Reason: "the CUDA driver failed to start: " + err.Error()}, nil
	case n == 0:
		return DeviceChoice{Sim: true, Reason: "the CUDA driver reports no device"}, nil
	}
	return DeviceChoice{Reason: fmt.Sprintf("the CUDA driver reports %d device(s)", n)}, nil
}

// parseDeviceEnv reads a VYRECUDA_DEVICE value.
func parseDeviceEnv(op, env string) (DeviceChoice, error) {
	reason := DeviceEnv + "=" + env
	switch {
	case env == "sim":
		return DeviceChoice{Sim: true, Env: env, Reason: reason}, nil
	case env == "cuda":
		return DeviceChoice{Env: env, Reason: reason}, nil
	case strings.HasPrefix(env, "cuda:"):
		n, err := strconv.Atoi(env[len("cuda:"):])
		if err == nil && n >= 0 && strconv.Itoa(n) == env[len("cuda:"):] {
			return DeviceChoice{Ordinal: n, Env: env, Reason: reason}, nil
		}
	}
	return DeviceChoice{}, newError(op, KindInvalidArgument, fmt.Sprintf("%s is %q", DeviceEnv, env),
		"set "+DeviceEnv+" to cuda, cuda:N (a device ordinal such as cuda:1) or sim, or unset it to choose by probing")
}

// OpenDefault opens a Backend on the device ChooseDevice picks (CUDA device
// 0 when a CUDA driver and a device are present, else the simulated device;
// VYRECUDA_DEVICE overrides it) with opts, and logs one line at Info level
// through the Backend's logger (WithLogger) saying which device and why.
// The simulated device is sim.New with its default configuration; the
// Backend closes it, as it closes the CUDA context, in Close. When a CUDA
// device was chosen but fails to open, that error is returned: there is no
// silent fallback to the simulated device.
func OpenDefault(opts ...Option) (*Backend, error) {
	const op = "OpenDefault"
	choice, err := ChooseDevice()
	if err != nil {
		return nil, withOp(op, err)
	}
	var b *Backend
	if choice.Sim {
		b, err = Open(sim.New(sim.Config{}), opts...)
	} else {
		b, err = OpenCUDA(choice.Ordinal, opts...)
	}
	if err != nil {
		return nil, withOp(op, err)
	}
	info := b.DeviceInfo()
	b.log.Info("vyrecuda: opened the default device", "device", choice.String(), "name", info.Name,
		"memory", info.TotalMemory, "reason", choice.Reason)
	return b, nil
}
