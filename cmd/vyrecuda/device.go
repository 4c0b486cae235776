package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// Device choices for -device.
const (
	deviceAuto = "auto"
	deviceSim  = "sim"
	deviceCUDA = "cuda"
)

// deviceFlag is the value of -device; Set refuses anything but the three
// choices, so a typo is a usage error (status 2), not a silent fallback.
type deviceFlag string

func (d *deviceFlag) String() string { return string(*d) }

func (d *deviceFlag) Set(s string) error {
	switch s {
	case deviceAuto, deviceSim, deviceCUDA:
		*d = deviceFlag(s)
		return nil
	}
	return fmt.Errorf("want auto, sim or cuda, got %q", s)
}

// deviceFlags registers -device and -ordinal on fs.
func deviceFlags(fs *flag.FlagSet) (*deviceFlag, *int) {
	dev := deviceFlag(deviceAuto)
	fs.Var(&dev, "device", "where to run: auto (GPU when present, else simulated), sim or cuda")
	ordinal := fs.Int("ordinal", 0, "CUDA device ordinal for -device cuda or auto")
	return &dev, ordinal
}

// session is an open Backend and what the user should be told about it.
type session struct {
	Backend *core.Backend
	Kind    string // deviceCUDA or deviceSim
	Info    core.DeviceInfo
	Reason  string // why auto chose this device; empty when chosen explicitly
	sim     *sim.Device
	// drv is the Driver under Backend, for the benchmark's baselines (the
	// driver's own copies); nil when unknown.
	drv core.Driver
}

// openCUDA opens a Backend on a real device and returns the Driver under
// it (which the Backend closes). It is a variable so tests can check the
// auto fallback without a GPU.
var openCUDA = func(ordinal int, opts ...core.Option) (*core.Backend, core.Driver, error) {
	drv, err := core.NewCUDADriver(ordinal)
	if err != nil {
		return nil, nil, err
	}
	b, err := core.Open(drv, opts...)
	if err != nil {
		if c, ok := drv.(io.Closer); ok {
			err = errors.Join(err, c.Close())
		}
		return nil, nil, err
	}
	return b, drv, nil
}

// chooseDevice is core.ChooseDevice, the choice -device auto follows
// (VYRECUDA_DEVICE included). It is a variable for the same reason as
// openCUDA.
var chooseDevice = core.ChooseDevice

// openSession opens the device the user asked for, with opts for the
// Backend. simMemory sizes the simulated device; zero takes its default.
// -device auto follows core.ChooseDevice, with -ordinal for the GPU unless
// VYRECUDA_DEVICE names one; unlike core.OpenDefault it falls back to the
// simulated device, saying why, when the probed GPU fails to open.
func openSession(choice string, ordinal int, simMemory uint64, opts ...core.Option) (*session, error) {
	switch choice {
	case deviceCUDA:
		return openCUDASession(ordinal, "", opts)
	case deviceSim:
		return openSimSession(simMemory, "", opts)
	}
	c, err := chooseDevice()
	if err != nil {
		return nil, err
	}
	if c.Sim {
		return openSimSession(simMemory, c.Reason, opts)
	}
	if c.Env != "" {
		return openCUDASession(c.Ordinal, c.Reason, opts)
	}
	s, err := openCUDASession(ordinal, "a CUDA device is present", opts)
	if err != nil {
		return openSimSession(simMemory, fmt.Sprintf("opening CUDA device %d failed: %v", ordinal, err), opts)
	}
	return s, nil
}

func openCUDASession(ordinal int, reason string, opts []core.Option) (*session, error) {
	b, drv, err := openCUDA(ordinal, opts...)
	if err != nil {
		return nil, err
	}
	return &session{Backend: b, Kind: deviceCUDA, Info: b.DeviceInfo(), Reason: reason, drv: drv}, nil
}

func openSimSession(memory uint64, reason string, opts []core.Option) (*session, error) {
	dev := sim.New(sim.Config{TotalMemory: memory})
	b, err := core.Open(dev, opts...)
	if err != nil {
		return nil, err
	}
	return &session{Backend: b, Kind: deviceSim, Info: b.DeviceInfo(), Reason: reason, sim: dev, drv: dev}, nil
}

// Describe is the one line that says where the command runs.
func (s *session) Describe() string {
	where := fmt.Sprintf("GPU %d", s.Info.Ordinal)
	if s.Kind == deviceSim {
		where = "simulated (no GPU needed)"
	}
	line := fmt.Sprintf("device: %s: %s, %s, compute capability %d.%d",
		where, s.Info.Name, formatBytes(s.Info.TotalMemory), s.Info.CCMajor, s.Info.CCMinor)
	if s.Reason != "" {
		line += "; -device auto chose it: " + s.Reason
	}
	return line
}

// Close closes the Backend and, on the simulated device, checks that it
// released every object it created.
func (s *session) Close() error {
	err := s.Backend.Close()
	if s.sim != nil {
		if live := s.sim.Live(); !live.Zero() {
			err = errors.Join(err, fmt.Errorf("the simulated device still holds objects after Close: %v", live))
		}
	}
	return err
}
