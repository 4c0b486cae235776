package proptest

// The configuration of one property sequence: the faults it injects, the
// simulated device and Backend options it runs with, the logger that counts
// what the Backend reports, and the foreign Backend whose handle the runners
// pass in as one the Backend under test never issued.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Fault modes.
type faultMode int

const (
	faultsOff    faultMode = iota
	faultsChosen           // a step may carry one fault, armed for that step only
	faultsRandom           // sim.FailRate over the listed operations for the whole sequence
)

// faultOps are the driver calls faults are injected into: allocation, pinned
// allocation and registration, copies, memset, stream and event creation,
// synchronization and the memory query. Releases (MemFree, HostFree,
// destroys) are left out on purpose: a Backend has nowhere to report a
// failed release from a pool eviction except its log, so those leak by
// design; Free's own MemFree is covered by freeStep's fault.
var faultOps = []sim.Op{
	sim.OpMemGetInfo, sim.OpMemAlloc, sim.OpHostAlloc, sim.OpHostRegister,
	sim.OpStreamCreate, sim.OpEventCreate, sim.OpStreamSynchronize, sim.OpEventSynchronize, sim.OpStreamQuery,
	sim.OpMemcpyHtoDAsync, sim.OpMemcpyDtoHAsync, sim.OpMemcpyDtoDAsync, sim.OpMemsetD8Async,
	sim.OpLaunch, sim.OpEventRecord, sim.OpEventQuery, sim.OpModuleLoad, sim.OpModuleFunction,
	sim.OpStreamBeginCapture, sim.OpStreamEndCapture, sim.OpGraphInstantiate, sim.OpGraphLaunch,
	sim.OpLaunchProgrammatic, sim.OpGraphUpload,
}

// nullOps are the calls whose null-with-success result a Backend can detect
// (a zero handle, pointer or slice). A null result of an error-only call such
// as StreamSynchronize is a lie no caller can see through, so it is not used.
var nullOps = []sim.Op{sim.OpMemAlloc, sim.OpHostAlloc, sim.OpStreamCreate, sim.OpEventCreate}

// faultSpec is one chosen fault: the nth call of op during the step fails
// with code, or returns null with success.
type faultSpec struct {
	op   sim.Op
	nth  int
	null bool
	code cudaapi.Result
}

// String names the fault as the step trace prints it.
func (f faultSpec) String() string {
	if f.null {
		return fmt.Sprintf("null(%v#%d)", f.op, f.nth)
	}
	return fmt.Sprintf("fail(%v#%d,%d)", f.op, f.nth, int32(f.code))
}

// runConfig describes one sequence's device and Backend.
type runConfig struct {
	total         uint64
	devicePoolCap uint64
	pinnedPoolCap uint64
	poolLimit     int // WithResidentPoolLimit
	optPoolCap    int // WithOptimizerPoolCap; -1: the default
	staticCap     int // WithStaticCacheCap; -1: the default
	faults        faultMode
	rate          float64        // faultsRandom
	rateSeed      int64          // faultsRandom
	rateCode      cudaapi.Result // faultsRandom: the code random failures carry
	shared        bool           // several runners on one Backend (concurrency)
	// unmapped: the device does not map pinned host memory, so packed
	// readbacks copy their gather table up with a DMA of its own.
	unmapped bool
}

// device returns the simulated device a runner of c opens.
func (c runConfig) device() *sim.Device {
	cfg := sim.Config{TotalMemory: c.total}
	if c.unmapped {
		caps := sim.DefaultCapabilities()
		caps.MappedPinnedHost = false
		cfg.Capabilities = &caps
	}
	return sim.New(cfg)
}

// tableDMAs is how many DMAs a packed readback spends on its table.
func (c runConfig) tableDMAs() uint64 {
	if c.unmapped {
		return 1
	}
	return 0
}

// String lists the configuration for failure messages.
func (c runConfig) String() string {
	return fmt.Sprintf("{total=%dMiB devpool=%d pinpool=%d poollimit=%d optpool=%d static=%d faults=%d rate=%g seed=%d code=%d unmapped=%v}",
		c.total>>20, c.devicePoolCap, c.pinnedPoolCap, c.poolLimit, c.optPoolCap, c.staticCap, c.faults, c.rate, c.rateSeed, c.rateCode, c.unmapped)
}

// logCounter is the Backend's logger in these properties: it keeps the
// expected error reports of fault runs out of the test output, and lets a
// fault-free run prove the Backend never had to log (a logged repair or
// release failure there is a bug).
type logCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	last string
}

// Enabled takes every level, so that every report is counted.
func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts a report and keeps its message as the last one seen.
func (l *logCounter) Handle(_ context.Context, rec slog.Record) error {
	l.n.Add(1)
	l.mu.Lock()
	l.last = rec.Message
	l.mu.Unlock()
	return nil
}

// WithAttrs returns the same counter: attributes are not kept.
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns the same counter: groups are not kept.
func (l *logCounter) WithGroup(string) slog.Handler { return l }

// check fails when the Backend logged anything; it is called only for runs
// without faults.
func (l *logCounter) check() error {
	if n := l.n.Load(); n > 0 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return fmt.Errorf("the Backend logged %d error(s) without any fault injected, last: %q", n, l.last)
	}
	return nil
}

// options are the Backend options of c, with log as its logger.
func (c runConfig) options(log *logCounter) []core.Option {
	return []core.Option{
		core.WithLogger(slog.New(log)),
		core.WithDevicePoolCap(c.devicePoolCap),
		core.WithPinnedPoolCap(c.pinnedPoolCap),
		core.WithResidentPoolLimit(c.poolLimit),
	}
}

// foreignSide is a second Backend on its own device whose live handle the
// runners pass to the Backend under test as a foreign handle.
type foreignSide struct {
	dev *sim.Device
	b   *core.Backend
	h   core.Buffer
}

// newForeign opens the second Backend and allocates its one live handle.
func newForeign() (*foreignSide, error) {
	dev := sim.New(sim.Config{TotalMemory: 1 << 20})
	b, err := core.Open(dev)
	if err != nil {
		return nil, err
	}
	h, err := b.Alloc(64)
	if err != nil {
		return nil, err
	}
	return &foreignSide{dev: dev, b: b, h: h}, nil
}

// close closes the foreign Backend and checks that its device holds nothing.
func (f *foreignSide) close() error {
	if err := f.b.Close(); err != nil {
		return err
	}
	if l := f.dev.Live(); !l.Zero() {
		return fmt.Errorf("foreign device leaked: %s", l)
	}
	return nil
}
