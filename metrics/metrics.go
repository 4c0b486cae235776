// Package metrics exports a Backend's MemoryStats and Telemetry to
// monitoring: NewCollector as a Prometheus collector
// (github.com/prometheus/client_golang), Publish through the standard
// library's expvar. It lives apart from package core so that core takes no
// dependency beyond the standard library and its own module.
//
// Every field of core.MemoryStats and core.Telemetry becomes one metric,
// named vyrecuda_<area>_<what> under Prometheus' rules: byte quantities end
// in _bytes, cumulative counts in _total (counters), everything else is a
// gauge, and each series carries a device label. Telemetry counters go back
// to zero on Backend.ResetTelemetry, which Prometheus reads as a counter
// reset. The full list is in docs/MEMORY.md and in Names.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vyre-go/vyrecuda/core"
)

// metric is one exported field: its name without the vyrecuda_ prefix, its
// help text, whether it is a counter, and how to read it from a snapshot.
type metric struct {
	field   string // the struct field it exports, for the tests
	name    string
	help    string
	counter bool
	mem     func(core.MemoryStats) uint64
	tel     func(core.Telemetry) uint64
}

// memoryMetrics export core.MemoryStats, field by field.
var memoryMetrics = []metric{
	{field: "Allocated", name: "memory_allocated_bytes", help: "Bytes of live resident buffers, as requested.", mem: func(m core.MemoryStats) uint64 { return m.Allocated }},
	{field: "PeakAllocated", name: "memory_allocated_peak_bytes", help: "Highest memory_allocated_bytes since Open or ResetPeakMemoryStats.", mem: func(m core.MemoryStats) uint64 { return m.PeakAllocated }},
	{field: "Reserved", name: "memory_reserved_bytes", help: "Device bytes held from the driver: live blocks at their class size, in-use staging and the cache.", mem: func(m core.MemoryStats) uint64 { return m.Reserved }},
	{field: "PeakReserved", name: "memory_reserved_peak_bytes", help: "Highest memory_reserved_bytes since Open or ResetPeakMemoryStats.", mem: func(m core.MemoryStats) uint64 { return m.PeakReserved }},
	{field: "CachedDevice", name: "memory_cached_device_bytes", help: "Bytes of freed device blocks kept for reuse.", mem: func(m core.MemoryStats) uint64 { return m.CachedDevice }},
	{field: "CachedPinned", name: "memory_cached_pinned_bytes", help: "Bytes of pinned host staging kept for reuse.", mem: func(m core.MemoryStats) uint64 { return m.CachedPinned }},
	{field: "DeviceAllocs", name: "memory_device_allocs_total", help: "Driver device allocations that succeeded.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.DeviceAllocs }},
	{field: "DeviceFrees", name: "memory_device_frees_total", help: "Driver device frees that succeeded.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.DeviceFrees }},
	{field: "AllocRetries", name: "memory_alloc_retries_total", help: "Allocations that gave cached memory back and tried again.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.AllocRetries }},
	{field: "OOMs", name: "memory_ooms_total", help: "Allocations refused for lack of memory or budget after the retries.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.OOMs }},
	{field: "Budget", name: "memory_budget_bytes", help: "Most device bytes the Backend reserves.", mem: func(m core.MemoryStats) uint64 { return m.Budget }},
	{field: "DeviceCacheCap", name: "memory_device_cache_cap_bytes", help: "Cap on the bytes of the device cache.", mem: func(m core.MemoryStats) uint64 { return m.DeviceCacheCap }},
	{field: "PinnedCacheCap", name: "memory_pinned_cache_cap_bytes", help: "Cap on the bytes of the pinned staging cache.", mem: func(m core.MemoryStats) uint64 { return m.PinnedCacheCap }},
	{field: "CacheHits", name: "memory_cache_hits_total", help: "Device allocations served from the cache with no driver call.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.CacheHits }},
	{field: "CacheMisses", name: "memory_cache_misses_total", help: "Device allocations that needed a new block.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.CacheMisses }},
	{field: "FreeMemoryReads", name: "memory_free_memory_reads_total", help: "Queries of the device's free memory.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.FreeMemoryReads }},
	{field: "ReleasedBytes", name: "memory_released_bytes_total", help: "Cached device bytes given back to the driver by retries and Trim.", counter: true, mem: func(m core.MemoryStats) uint64 { return m.ReleasedBytes }},
	{field: "ReservedPinned", name: "memory_reserved_pinned_bytes", help: "Pinned staging bytes held from the driver.", mem: func(m core.MemoryStats) uint64 { return m.ReservedPinned }},
}

// telemetryMetrics export core.Telemetry, field by field.
var telemetryMetrics = []metric{
	{field: "HostToDeviceBytes", name: "transfer_host_to_device_bytes_total", help: "Bytes copied host to device.", counter: true, tel: func(t core.Telemetry) uint64 { return t.HostToDeviceBytes }},
	{field: "DeviceToHostBytes", name: "transfer_device_to_host_bytes_total", help: "Bytes copied device to host.", counter: true, tel: func(t core.Telemetry) uint64 { return t.DeviceToHostBytes }},
	{field: "UploadOps", name: "transfer_uploads_total", help: "Upload calls that moved at least one byte.", counter: true, tel: func(t core.Telemetry) uint64 { return t.UploadOps }},
	{field: "ReadbackOps", name: "transfer_readbacks_total", help: "Readback calls that moved at least one byte.", counter: true, tel: func(t core.Telemetry) uint64 { return t.ReadbackOps }},
	{field: "SyncPoints", name: "sync_points_total", help: "Host waits on the device (stream or event synchronizations).", counter: true, tel: func(t core.Telemetry) uint64 { return t.SyncPoints }},
	{field: "ResidentAllocationBytes", name: "resident_allocated_bytes_total", help: "Bytes allocated for resident buffers.", counter: true, tel: func(t core.Telemetry) uint64 { return t.ResidentAllocationBytes }},
	{field: "DeviceCopies", name: "transfer_device_copies_total", help: "Driver copy operations queued after fusion.", counter: true, tel: func(t core.Telemetry) uint64 { return t.DeviceCopies }},
	{field: "RequestedCopies", name: "transfer_requested_copies_total", help: "Copies requested before fusion.", counter: true, tel: func(t core.Telemetry) uint64 { return t.RequestedCopies }},
	{field: "MemsetOps", name: "memsets_total", help: "Device memsets queued.", counter: true, tel: func(t core.Telemetry) uint64 { return t.MemsetOps }},
	{field: "KernelLaunches", name: "kernel_launches_total", help: "Kernels launched (packed-transfer kernels not included).", counter: true, tel: func(t core.Telemetry) uint64 { return t.KernelLaunches }},
	{field: "PackedLaunches", name: "transfer_packed_launches_total", help: "Kernels that move transfers' data: scatter and gather of packed transfers, copy kernels writing reads into pinned memory.", counter: true, tel: func(t core.Telemetry) uint64 { return t.PackedLaunches }},
	{field: "Collectives", name: "collectives_total", help: "Collective calls the device took part in.", counter: true, tel: func(t core.Telemetry) uint64 { return t.Collectives }},
}

// deviceMemory is the device's total memory, beside the fields.
var deviceMemory = metric{name: "device_memory_bytes", help: "Total memory of the device."}

// Names returns the names of every metric a collector exports, in the
// order it describes them.
func Names() []string {
	names := make([]string, 0, len(memoryMetrics)+len(telemetryMetrics)+1)
	for _, m := range allMetrics() {
		names = append(names, m.fullName())
	}
	return names
}

func allMetrics() []metric {
	all := append([]metric{deviceMemory}, memoryMetrics...)
	return append(all, telemetryMetrics...)
}

func (m metric) fullName() string { return "vyrecuda_" + m.name }

// collector is the prometheus.Collector NewCollector returns.
type collector struct {
	backends []*core.Backend
	labels   []string // the device label of each Backend
	descs    []*prometheus.Desc
	metrics  []metric
}

// NewCollector returns a prometheus.Collector that reports, at each scrape,
// the MemoryStats and Telemetry of every Backend given, plus
// vyrecuda_device_memory_bytes, each series labelled device="N" by the
// device's ordinal. A second Backend on the same ordinal is labelled
// "N#2", a third "N#3", in the order given, so the series never collide.
// Nil Backends are skipped. A closed Backend keeps reporting what
// MemoryStats and Telemetry return after Close. Register it once:
//
//	prometheus.MustRegister(metrics.NewCollector(b))
func NewCollector(backends ...*core.Backend) prometheus.Collector {
	c := &collector{metrics: allMetrics()}
	seen := map[int]int{}
	for _, b := range backends {
		if b == nil {
			continue
		}
		ord := b.DeviceInfo().Ordinal
		seen[ord]++
		label := strconv.Itoa(ord)
		if n := seen[ord]; n > 1 {
			label += "#" + strconv.Itoa(n)
		}
		c.backends = append(c.backends, b)
		c.labels = append(c.labels, label)
	}
	for _, m := range c.metrics {
		c.descs = append(c.descs, prometheus.NewDesc(m.fullName(), m.help, []string{"device"}, nil))
	}
	return c
}

// Describe sends the descriptor of every metric.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect sends one sample of every metric for every Backend.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for i, b := range c.backends {
		ms, tel, total := b.MemoryStats(), b.Telemetry(), b.DeviceInfo().TotalMemory
		for k, m := range c.metrics {
			v, kind := total, prometheus.GaugeValue
			switch {
			case m.mem != nil:
				v = m.mem(ms)
			case m.tel != nil:
				v = m.tel(tel)
			}
			if m.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(c.descs[k], kind, float64(v), c.labels[i])
		}
	}
}
