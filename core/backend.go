package core

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/stats"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// Backend keeps buffers resident on one device behind a Driver and moves
// bytes between them and the host. Open builds one; Close releases everything
// it owns. A Backend is safe for concurrent use by many goroutines.
//
// Locks, outermost first (a goroutine only ever takes them in this order):
//
//   - life guards closed. Every public call holds it shared for its whole
//     duration, so Close, which takes it exclusively, waits for running calls
//     and then tears down state no call is using. Public methods never call
//     other public methods while holding it (RWMutex read locks must not
//     nest, or a waiting Close deadlocks them).
//   - async.mu guards the stream and the bookkeeping of queued asynchronous
//     uploads (UploadAsync, SynchronizeUploads).
//   - the launch pool's quarantine lock (quarantine.go, package streams)
//     is held across the StreamSynchronize of its retries and the releases
//     of what it holds (which take pinned.mu and the pools' locks inside
//     it), and never together with store.mu.
//   - store.mu guards the resident table (see residentStore).
//   - pinned.mu (the hostmem.Registry's lock) guards the registry of
//     caller-pinned host memory.
//
// No lock is held across a stream or event synchronization except async.mu
// in SynchronizeUploads, which exists to serialize exactly that wait. The
// pools and the launch-resource pool have their own internal locks and are
// called without any of the above held.
type Backend struct {
	drv  Driver
	info DeviceInfo
	cfg  config
	log  *slog.Logger

	life   sync.RWMutex
	closed bool // guarded by life

	store    residentStore
	pinned   hostmem.Registry
	async    asyncUploads
	devPool  *devmem.Pool
	hostPool *hostmem.Pool
	launch   *streams.Pool
	xfer     *xferEngine // runs the transfers (xfer.go)
	tel      stats.Counters
	closing  closer       // what Close gives back and retries (closeleft.go); guarded by life
	progs    programCache // loaded Program modules (program.go, dispatch work)
	peers    peerCache    // how other Backends are reached (peer.go)
	graphs   atomic.Int64 // open Graphs (graph.go); Close refuses while any is open
	pdl      bool         // programmatic dependent launch in use (pdl.go)
	// abandoned counts work RunContext or Graph.ReplayContext stopped
	// waiting for and collects in the background, and compilations
	// CompileContext runs in the background; Close waits for it
	// (context.go, compile.go).
	abandoned sync.WaitGroup
}

// Open builds a Backend over drv. It asks the driver for the device's
// description once; everything else is created lazily on first use, so Open
// itself allocates nothing on the device.
//
// Open takes ownership of drv: when drv also implements io.Closer (the real
// driver from NewCUDADriver does), Backend.Close closes it last, after
// everything was released through it. To keep using a driver after the
// Backend is closed, pass a wrapper that does not implement io.Closer.
func Open(drv Driver, opts ...Option) (*Backend, error) {
	const op = "Open"
	if drv == nil {
		return nil, newError(op, KindInvalidArgument, "driver is nil",
			"pass a Driver such as core.OpenCUDA's or sim.New's")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	info, err := drv.Info()
	if err != nil {
		return nil, driverError(op, "Info", err)
	}
	if info.TotalMemory == 0 {
		return nil, newError(op, KindDriver, "the driver reports 0 bytes of device memory",
			"check that the driver is bound to a working device")
	}
	cfg.resolve(info.TotalMemory)
	if r, ok := drv.(driver.PlanProcsReporter); ok {
		cfg.xfer.Procs = r.PlanProcs() // the same plans, and so calls, on every host
	}
	b := &Backend{drv: drv, info: info, cfg: cfg, log: cfg.log}
	b.devPool = devmem.New(drv, devmem.Config{Total: info.TotalMemory, MaxCached: cfg.devicePoolCap,
		MaxClassed: cfg.residentPoolLimit, Log: cfg.log, BeforeFree: b.settleUnfenced})
	b.store.init(b.devPool, cfg.log, cacheNotifier(drv), cfg.residentPoolLimit)
	b.hostPool = newHostPool(drv, &cfg)
	b.closing = closer{drv: drv, store: &b.store, devPool: b.devPool, hostPool: b.hostPool, pinned: &b.pinned}
	b.launch = streams.NewPool(drv, cfg.log, streams.DefaultMaxIdle)
	b.xfer = newXferEngine(b)
	b.pdl = usePDL(drv, info, cfg)
	registerOpen(b)
	return b, nil
}

// enter starts a public call: it holds life shared until exit and fails with
// ErrClosed once Close has run.
func (b *Backend) enter(op string) error {
	if b == nil {
		return nilBackend(op)
	}
	b.life.RLock()
	if b.closed {
		b.life.RUnlock()
		return closedError(op)
	}
	return nil
}

func (b *Backend) exit() { b.life.RUnlock() }

// nilBackend reports a call on a nil *Backend.
func nilBackend(op string) *Error {
	return newError(op, KindInvalidArgument, "the Backend is nil",
		"use the Backend core.Open returned, after checking its error")
}

func closedError(op string) *Error {
	return newError(op, KindClosed, "the Backend is closed", "open a new Backend with core.Open")
}

// Close releases everything the Backend owns: resident buffers, pinned host
// buffers and registrations, pooled device and host memory, streams and
// events. It waits for calls already running, and refuses with ErrInFlight,
// changing nothing, while work is in flight: resident buffers bound to
// unfinished work, asynchronous uploads not yet synchronized, or launch
// resources still leased. After Close every call returns ErrClosed,
// including Close itself. A driver failure while releasing is returned (the
// first one) after everything else has still been released. When the
// driver fails to free memory, Close keeps that memory counted in
// MemoryStats and says what it is; a later Close retries exactly those
// frees (and only then, with nothing left, closes a driver the Backend
// owns), returning ErrClosed once nothing is left.
//
// Close first retries the streams of failed calls that could not be drained
// (quarantine.go). When one still cannot be synchronized, Close destroys
// its launch resources but leaves the memory its queued work may touch
// allocated (its staging and the resident buffers it targets: freeing them
// could let that work write into memory handed to someone else), releases
// everything else, and returns an ErrDriver saying what was left. A
// synchronization that keeps failing means the device context is most
// likely broken; that memory is reclaimed with the context.
func (b *Backend) Close() error {
	const op = "Close"
	if b == nil {
		return nilBackend(op)
	}
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed {
		return b.closing.retry(op)
	}
	b.abandoned.Wait()
	if n := b.graphs.Load(); n > 0 {
		return newError(op, KindInFlight, fmt.Sprintf("%d Graph(s) are open", n),
			"close every Graph from Capture before closing the Backend")
	}
	if n := b.async.queued(); n > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("%d asynchronous upload(s) are queued and not synchronized", n),
			"call SynchronizeUploads before Close")
	}
	// The quarantine's own in-flight references and leases do not refuse
	// Close: SettleQuarantine deals with them below.
	if refs, handles := b.store.inflightTotal(); refs-b.launch.QuarantinedRefs() > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("%d resident buffer(s) are used by unfinished work (%d use(s): one per buffer of each unfinished batch, dispatch or asynchronous upload)", handles, refs-b.launch.QuarantinedRefs()),
			"wait for pending work (Await or Close every Pending) before closing the Backend; a Pending dropped without either is released only after a garbage collection finds it")
	}
	if n := b.launch.Counts().Leases - int(b.launch.QuarantinedLeases()); n > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("%d launch-resource lease(s) still out", n),
			"await or close every pending dispatch before closing the Backend")
	}
	firstErr := abandonedError(op, b.launch.SettleQuarantine(), b.log)
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = closeError(op, err)
		}
	}
	// The launch pool refuses while leases are out; asking it first means a
	// refusal leaves everything else untouched.
	lerr := b.launch.Close()
	if errors.Is(lerr, ErrInFlight) {
		return closeError(op, lerr)
	}
	keep(lerr)
	b.closed = true
	unregisterOpen(b)
	keep(b.store.releaseAll(op))
	keep(b.closePrograms()) // unload Program modules (program.go); no launch can be in flight here
	keep(b.devPool.Close())
	keep(b.pinned.ReleaseAll(op, b.drv))
	keep(b.hostPool.Close())
	return b.closing.finish(op, firstErr)
}

// closeError reports a failure of one part of Close under the name Close,
// keeping the part's own name ("close device pool") in the detail.
func closeError(op string, err error) error {
	e, ok := err.(*Error)
	if !ok || e.Op == op {
		return err
	}
	c := *e
	if c.Op != "" {
		c.Detail = c.Op + ": " + c.Detail
	}
	c.Op = op
	return &c
}

// DeviceInfo returns the description of the device the Backend runs on.
func (b *Backend) DeviceInfo() DeviceInfo {
	if b == nil {
		return DeviceInfo{}
	}
	return b.info
}

// LiveFreeMemory asks the driver how many bytes of device memory are free now.
func (b *Backend) LiveFreeMemory() (uint64, error) {
	const op = "LiveFreeMemory"
	if err := b.enter(op); err != nil {
		return 0, err
	}
	defer b.exit()
	free, _, err := b.drv.MemGetInfo()
	if err != nil {
		return 0, driverError(op, "MemGetInfo", err)
	}
	return free, nil
}

// LaunchResourceCounts reports the launch-resource pool's idle, created and
// destroyed streams and events, the leases out and, of those, the ones held
// in quarantine because their stream could not be drained after a failure.
func (b *Backend) LaunchResourceCounts() LaunchResourceCounts {
	if b == nil {
		return LaunchResourceCounts{}
	}
	return b.launch.Counts()
}

// settleUnfenced waits for the Backend's unfenced uploads
// (streams.Pool.Settle) before device memory goes back to the driver. A
// failure is logged: the device failed, and the free goes ahead.
func (b *Backend) settleUnfenced() {
	if b.launch == nil {
		return
	}
	if err := b.launch.Settle("free device memory"); err != nil {
		b.log.Error("waiting for unfenced uploads before a free failed", "err", err)
	}
}
