package sim

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultName          = "vyrecuda simulated device"
	DefaultTotalMemory   = 1 << 30 // 1 GiB
	DefaultCCMajor       = 9
	DefaultCCMinor       = 0
	DefaultPinnedLimit   = 4 << 30 // 4 GiB of simulated page-locked host memory
	deviceAddressBase    = 0x7f00_0000_0000
	deviceAddressAlign   = 256
	firstHandle          = 0x1000
	maxSharedMemPerBlock = 227 << 10
)

// Config describes the simulated device. The zero value is usable: every
// zero field takes its default.
type Config struct {
	// TotalMemory is the device memory in bytes (default DefaultTotalMemory).
	// Allocations are real Go memory, so only what is allocated costs RAM.
	TotalMemory uint64
	// Name is the device name Info reports (default DefaultName).
	Name string
	// Ordinal is the device ordinal Info reports.
	Ordinal int
	// CCMajor and CCMinor are the compute capability (default 9.0).
	CCMajor, CCMinor int
	// FeatureKey is the key Info reports for cached code and uploads
	// (default: a hash of the name and compute capability).
	FeatureKey uint64
	// PinnedLimit caps the bytes HostAlloc hands out at once (default
	// DefaultPinnedLimit); past it HostAlloc fails with
	// CUDA_ERROR_OUT_OF_MEMORY.
	PinnedLimit uint64
	// AllowPageable lets asynchronous copies use host memory that is neither
	// from HostAlloc nor registered. Off by default so a Backend that forgot
	// to stage through pinned memory is caught.
	AllowPageable bool
	// AnyFunction makes ModuleFunction succeed for any name, not only for
	// names declared with ".entry name" in the module image.
	AnyFunction bool
	// PoisonCache is a debug option, the simulated counterpart of running
	// under compute-sanitizer: device memory a Backend returns to one of its
	// caches (driver.CacheNotifier's MemCached: a freed pooled buffer, an
	// optimizer dispatcher's pooled buffer) is filled with PoisonByte, and
	// until it is handed out again (MemReused) every copy, memset and kernel
	// access to it fails with CUDA_ERROR_ILLEGAL_ADDRESS, so a use after
	// free is caught instead of reading memory the pool kept. Pinned
	// staging blocks in the Backend's staging cache (HostCached, HostReused)
	// are poisoned and refused to asynchronous copies the same way. Reused
	// memory keeps the poison bytes until written, showing reads of
	// uninitialized memory.
	PoisonCache bool
	// Capabilities, when set, is what Capabilities reports, so tests can
	// take optional features away (default: DefaultCapabilities()).
	Capabilities *driver.Capabilities
	// CompileDelay makes each Compile (the stand-in for NVRTC) sleep this
	// long before it checks the source, as a real compilation takes
	// milliseconds to seconds and cannot be interrupted: a test sees what
	// a slow compiler does to core.Backend.CompileContext. Zero: no delay.
	CompileDelay time.Duration
}

// DefaultCapabilities is what a simulated device reports unless
// Config.Capabilities says otherwise: every optional feature, on a CUDA 13.0
// driver (less programmatic dependent launch below compute capability 9.0).
func DefaultCapabilities() driver.Capabilities {
	return driver.Capabilities{DriverVersion: 13000, BatchedCopies: true, MemoryPools: true,
		Graphs: true, ConditionalGraphNodes: true, VirtualMemory: true, PeerAccess: true,
		ProgrammaticLaunch: true, MappedPinnedHost: true}
}

// Device is a simulated GPU: a driver.Driver and driver.HostKernelBinder backed
// by Go memory. See the package documentation for its behaviour.
//
// A Device is safe for concurrent use: one mutex guards all of its state,
// and queued work (including host kernels) runs with that mutex held, so a
// host kernel must not call back into the Device.
type Device struct {
	caps driver.Capabilities // fixed at New; read without the lock
	// mu guards every field below. Devices of one Machine share it, so work
	// that crosses devices (peer copies, collectives, waits on a peer's
	// events) runs under one lock.
	mu  *sync.Mutex
	cfg Config
	// machine is the Machine the device belongs to (nil for sim.New's);
	// index is its place there.
	machine *Machine
	index   int
	info    driver.DeviceInfo

	// Device memory: real bytes at fake addresses. allocs finds an
	// allocation by its base; sorted finds the allocation holding an
	// interior address. Addresses come from the process-wide nextAddress
	// and only grow, so sorted stays sorted by appending, a freed address is
	// never handed out again, and no two Devices share an address.
	allocs    map[uint64]*allocation
	sorted    []*allocation
	allocated uint64

	// Host memory the device may copy to or from asynchronously.
	pinned      rangeSet // from HostAlloc; holds the slices
	registered  rangeSet // from HostRegister; caller memory
	pinnedBytes uint64

	// Handles of every kind come from the process-wide nextHandle, so a
	// handle of one kind, or of another Device, is never mistaken for one
	// of these.
	streams   map[driver.Stream]*stream
	events    map[driver.Event]*event
	modules   map[driver.Module]*module
	functions map[driver.Function]*function
	graphs    map[driver.DeviceGraph]*graph
	execs     map[driver.GraphExec]*graphExec

	peerOn map[*Device]bool   // peers d enabled access to (EnablePeerAccess)
	comms  map[*comm]struct{} // live communicators of d's ranks

	clock  time.Duration // simulated device time, advanced as work executes
	queued int           // queued, unexecuted operations on all streams
	// holdQueries: queries report queued work unfinished (HoldQueries).
	holdQueries bool

	calls  [numOps]uint64
	faults faultState
}

var (
	_ driver.Driver           = (*Device)(nil)
	_ driver.HostKernelBinder = (*Device)(nil)
	_ driver.CacheNotifier    = (*Device)(nil)
)

// New returns a simulated device described by cfg.
func New(cfg Config) *Device {
	if cfg.TotalMemory == 0 {
		cfg.TotalMemory = DefaultTotalMemory
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.CCMajor == 0 && cfg.CCMinor == 0 {
		cfg.CCMajor, cfg.CCMinor = DefaultCCMajor, DefaultCCMinor
	}
	if cfg.PinnedLimit == 0 {
		cfg.PinnedLimit = DefaultPinnedLimit
	}
	if cfg.FeatureKey == 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "sim|%s|%d.%d", cfg.Name, cfg.CCMajor, cfg.CCMinor)
		cfg.FeatureKey = h.Sum64()
	}
	caps := DefaultCapabilities()
	// As on a GPU, programmatic dependent launch needs compute capability 9.0.
	caps.ProgrammaticLaunch = cfg.CCMajor >= driver.ProgrammaticLaunchCCMajor
	if cfg.Capabilities != nil {
		caps = *cfg.Capabilities
	}
	d := &Device{
		mu:   new(sync.Mutex),
		cfg:  cfg,
		caps: caps,
		info: driver.DeviceInfo{
			Ordinal:     cfg.Ordinal,
			Name:        cfg.Name,
			TotalMemory: cfg.TotalMemory,
			CCMajor:     cfg.CCMajor,
			CCMinor:     cfg.CCMinor,
			FeatureKey:  cfg.FeatureKey,
		},
		allocs:    make(map[uint64]*allocation),
		streams:   make(map[driver.Stream]*stream),
		events:    make(map[driver.Event]*event),
		modules:   make(map[driver.Module]*module),
		functions: make(map[driver.Function]*function),
		graphs:    make(map[driver.DeviceGraph]*graph),
		execs:     make(map[driver.GraphExec]*graphExec),
	}
	// A device of its own is a Machine of one.
	d.machine = &Machine{mu: d.mu, cond: sync.NewCond(d.mu), devs: []*Device{d}, peer: [][]bool{{true}}}
	return d
}

// Config returns the configuration with defaults filled in.
func (d *Device) Config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Info reports the simulated device.
func (d *Device) Info() (driver.DeviceInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpInfo); done {
		return driver.DeviceInfo{}, err
	}
	return d.info, nil
}

// MemGetInfo reports free = total - bytes of live allocations, and total.
func (d *Device) MemGetInfo() (free, total uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpMemGetInfo); done {
		return 0, 0, err
	}
	return d.cfg.TotalMemory - d.allocated, d.cfg.TotalMemory, nil
}

// Process-wide counters: handles and device addresses are unique across
// every Device in the process, so one device's handle or pointer passed to
// another is refused like any unknown one.
var (
	nextHandle  atomic.Uintptr
	nextAddress atomic.Uint64
)

func init() {
	nextHandle.Store(firstHandle)
	nextAddress.Store(deviceAddressBase)
}

// newHandle returns a handle value never returned before in this process.
func (d *Device) newHandle() uintptr { return nextHandle.Add(1) - 1 }

// newAddress reserves span bytes of simulated address space, reporting false
// if the (64-bit) space is exhausted.
func newAddress(span uint64) (uint64, bool) {
	end := nextAddress.Add(span)
	if end < span || end-span < deviceAddressBase {
		return 0, false
	}
	return end - span, true
}
