package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// listDevices lists the visible CUDA devices. It is a variable so tests can
// show what info prints on a machine with GPUs.
var listDevices = core.Devices

// runInfo prints the driver version and devices. A machine without a driver
// or without a device is not a failure: info says so and points at the
// simulated device, so it succeeds in CI.
func runInfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: vyrecuda info\n\nPrints the CUDA driver version and every device's name, memory,\ncompute capability and optional driver features, how each device reaches\nthe others (peer access, native atomics, performance rank), or says that\nonly the simulated device is available.\n")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	devs, err := listDevices()
	ver := 0
	if len(devs) > 0 {
		ver = devs[0].DriverVersion
	}
	noDriver := errors.Is(err, cudaapi.ErrDriverNotFound)
	var res cudaapi.Result
	noDevice := errors.As(err, &res) && res == cudaapi.CUDA_ERROR_NO_DEVICE
	switch {
	case noDriver:
		fmt.Fprintln(stdout, "driver: none (no CUDA driver found on this machine)")
	case err != nil && !noDevice:
		fmt.Fprintln(stdout, "driver: present, but listing its devices failed")
		return fail(stderr, "info", err)
	case noDevice:
		fmt.Fprintln(stdout, "driver: present, but it reports no CUDA device")
	default:
		fmt.Fprintf(stdout, "driver: CUDA %s\n", formatDriverVersion(ver))
		fmt.Fprintf(stdout, "devices: %d\n", len(devs))
		for _, d := range devs {
			fmt.Fprintf(stdout, "  [%d] %s: %s, compute capability %d.%d\n",
				d.Ordinal, d.Name, formatBytes(d.TotalMemory), d.CCMajor, d.CCMinor)
			fmt.Fprintf(stdout, "      %s\n", formatCapabilities(d.Capabilities))
		}
		printPeerMatrix(stdout, len(devs))
	}
	cfg := sim.New(sim.Config{}).Config()
	if noDriver || noDevice || len(devs) == 0 {
		fmt.Fprintln(stdout, "no GPU: the simulated device is available (-device sim; -device auto picks it here)")
	}
	fmt.Fprintf(stdout, "simulated device: %s: %s, compute capability %d.%d\n",
		cfg.Name, formatBytes(cfg.TotalMemory), cfg.CCMajor, cfg.CCMinor)
	fmt.Fprintf(stdout, "      %s\n", formatCapabilities(sim.DefaultCapabilities()))
	return exitOK
}

// formatCapabilities lists the optional features a device offers and lacks.
func formatCapabilities(c core.Capabilities) string {
	var has, lacks []string
	for _, f := range c.List() {
		if f.Offered {
			has = append(has, f.Name)
		} else {
			lacks = append(lacks, f.Name)
		}
	}
	out := "offers: " + orNone(has)
	if len(lacks) > 0 {
		out += "; lacks: " + strings.Join(lacks, ", ")
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// formatDriverVersion turns cuDriverGetVersion's 13000 into "13.0".
func formatDriverVersion(v int) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
