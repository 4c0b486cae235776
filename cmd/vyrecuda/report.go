package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/vyre-go/vyrecuda/core"
)

// Output file names inside -out DIR.
const (
	resultsFile = "results.json"
	plotFile    = "bandwidth.svg"
	w8PlotFile  = "w8.svg" // written when W8 ran
)

// Sweep directions.
const (
	dirUpload   = "upload"
	dirReadback = "readback"
)

// benchReport is results.json.
type benchReport struct {
	Tool      string           `json:"tool"`
	Command   string           `json:"command"`
	Time      string           `json:"time"`
	Host      hostReport       `json:"host"`
	Device    deviceReport     `json:"device"`
	Config    benchConfig      `json:"config"`
	Workloads []workloadResult `json:"workloads"`
	W8        []w8Row          `json:"w8,omitempty"`
	PeersW8   *w8Peers         `json:"peers_w8,omitempty"` // PyTorch's W8 figures, from -peers
	Sweep     []sweepPoint     `json:"sweep"`
}

// hostReport says what ran the benchmark.
type hostReport struct {
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
}

// deviceReport says where the benchmark ran.
type deviceReport struct {
	Kind              string `json:"kind"` // "cuda" or "sim"
	Name              string `json:"name"`
	MemoryBytes       uint64 `json:"memory_bytes"`
	ComputeCapability string `json:"compute_capability"`
	Reason            string `json:"reason,omitempty"` // why -device auto chose it
}

// workloadResult is one workload's measurement. Times are wall-clock
// nanoseconds per run.
type workloadResult struct {
	ID       string    `json:"id"`
	Title    string    `json:"title"`
	Bytes    int64     `json:"bytes"` // bytes moved per run; 0 for latency workloads
	Ops      int       `json:"ops"`   // operations per run
	Repeats  int       `json:"repeats"`
	MedianNs int64     `json:"median_ns"`
	MinNs    int64     `json:"min_ns"`
	MaxNs    int64     `json:"max_ns"`
	PerOpNs  float64   `json:"per_op_ns"`      // median run / ops
	GBps     float64   `json:"gbps,omitempty"` // bytes / median run
	Target   string    `json:"target"`
	Meets    *bool     `json:"meets,omitempty"` // only on a GPU: sim times say nothing about one
	PerRun   runCounts `json:"per_run"`
	// CPUMsPerGB is the process's CPU time per GB moved, in milliseconds,
	// over the measured runs (all threads; 0 when not measured).
	CPUMsPerGB float64 `json:"cpu_ms_per_gb,omitempty"`
	// PinnedDMANs is the median time of the DMA alone of Bytes, for
	// workloads judged against it.
	PinnedDMANs int64 `json:"pinned_dma_ns,omitempty"`
}

// runCounts is the Backend's telemetry per measured run.
type runCounts struct {
	HostToDeviceBytes uint64  `json:"h2d_bytes"`
	DeviceToHostBytes uint64  `json:"d2h_bytes"`
	RequestedCopies   float64 `json:"requested_copies"`
	DeviceCopies      float64 `json:"device_copies"`
	SyncPoints        float64 `json:"sync_points"`
	KernelLaunches    float64 `json:"kernel_launches"`
}

// sweepPoint is one size of the bandwidth sweep.
type sweepPoint struct {
	Direction string  `json:"direction"` // "upload" or "readback"
	Bytes     int64   `json:"bytes"`
	Repeats   int     `json:"repeats"`
	MedianNs  int64   `json:"median_ns"`
	MinNs     int64   `json:"min_ns"`
	MaxNs     int64   `json:"max_ns"`
	GBps      float64 `json:"gbps"` // bytes / median
	// CPUMsPerGB is the process's CPU time per GB moved, in milliseconds.
	CPUMsPerGB float64 `json:"cpu_ms_per_gb,omitempty"`
	// DriverPageableGBps is the driver's own synchronous copy of the same
	// Go slice (cuMemcpyHtoD / cuMemcpyDtoH), median, in the same process.
	DriverPageableGBps float64 `json:"driver_pageable_gbps,omitempty"`
	// PinnedDMAGBps is one DMA of the same size from or into page-locked
	// memory, fenced alone: the ceiling for any staging scheme.
	PinnedDMAGBps float64 `json:"pinned_dma_gbps,omitempty"`
	// Meets says whether the library reached the driver's pageable copy
	// (at least 1.0x); only on a GPU, where that copy was measured.
	Meets *bool `json:"meets,omitempty"`
}

func (r *benchReport) setHost() {
	r.Host = hostReport{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
}

func (r *benchReport) marshal() ([]byte, error) {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(js, '\n'), nil
}

// perRun divides the telemetry of n runs by n.
func perRun(t core.Telemetry, n int) runCounts {
	f := float64(n)
	return runCounts{
		HostToDeviceBytes: t.HostToDeviceBytes / uint64(n),
		DeviceToHostBytes: t.DeviceToHostBytes / uint64(n),
		RequestedCopies:   float64(t.RequestedCopies) / f,
		DeviceCopies:      float64(t.DeviceCopies) / f,
		SyncPoints:        float64(t.SyncPoints) / f,
		KernelLaunches:    float64(t.KernelLaunches) / f,
	}
}

// stats summarizes repeated runs.
type stats struct{ Median, Min, Max time.Duration }

// summarize returns the median (the mean of the middle two for an even
// count), min and max of ds; ds must not be empty.
func summarize(ds []time.Duration) stats {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stats{Median: med, Min: s[0], Max: s[n-1]}
}

// printTable prints the workloads and the sweep as aligned tables.
func printTable(w io.Writer, r *benchReport) {
	if len(r.Workloads) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nworkload\tmedian\tmin\tmax\trate\tCPU ms/GB\twork/run\tsyncs/run\ttarget (H100)\tstatus")
		for _, x := range r.Workloads {
			fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Title,
				formatDuration(time.Duration(x.MedianNs)), formatDuration(time.Duration(x.MinNs)),
				formatDuration(time.Duration(x.MaxNs)), rate(x), optFloat(x.CPUMsPerGB), work(x.PerRun),
				fmt.Sprintf("%.3g", x.PerRun.SyncPoints), x.Target, status(x))
		}
		tw.Flush()
	}
	printW8(w, r)
	if len(r.Sweep) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nsweep\tsize\tmedian\tmin\tmax\tGB/s (median)\tdriver pageable GB/s\tx pageable\tpinned DMA GB/s\tof DMA\tCPU ms/GB\t>= 1x pageable")
		for _, p := range r.Sweep {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Direction, formatBytes(uint64(p.Bytes)),
				formatDuration(time.Duration(p.MedianNs)), formatDuration(time.Duration(p.MinNs)),
				formatDuration(time.Duration(p.MaxNs)), p.GBps,
				optFloat(p.DriverPageableGBps), ratio(p.GBps, p.DriverPageableGBps, "x"),
				optFloat(p.PinnedDMAGBps), ratio(p.GBps*100, p.PinnedDMAGBps, "%"), optFloat(p.CPUMsPerGB), meetsText(p.Meets))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\n%d measured runs after %d warm-up runs each; times are wall clock per run.\n", r.Config.Repeats, r.Config.Warmup)
	if r.Device.Kind == deviceSim {
		fmt.Fprintln(w, "Simulated device: times measure this host's memory, not a GPU; targets are not judged.")
	}
}

func rate(x workloadResult) string {
	if x.Bytes > 0 {
		return fmt.Sprintf("%.2f GB/s", x.GBps)
	}
	return formatDuration(time.Duration(x.PerOpNs)) + "/op"
}

// work says what one run asked of the device: copies requested and queued
// after fusion, or kernel launches.
func work(c runCounts) string {
	switch {
	case c.KernelLaunches > 0:
		return fmt.Sprintf("%.4g launches", c.KernelLaunches)
	case c.RequestedCopies == 0 && c.DeviceCopies == 0:
		return "-"
	}
	return fmt.Sprintf("%.4g -> %.4g copies", c.RequestedCopies, c.DeviceCopies)
}

func status(x workloadResult) string { return meetsText(x.Meets) }

// optFloat prints v with two decimals, or "-" when it was not measured.
func optFloat(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio prints a/b with unit, or "-" when b was not measured.
func ratio(a, b float64, unit string) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%s", a/b, unit)
}
