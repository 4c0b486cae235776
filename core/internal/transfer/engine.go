package transfer

import (
	"errors"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/stats"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Engine executes the transfers of one Backend once the Backend has
// validated them and holds their buffers in flight: it plans each call,
// takes its pinned and device staging, leases its streams, queues its
// copies and launches, fences it, and counts it. A failed call drains its
// streams, or hands them with everything their work may still use to the
// launch pool's quarantine. The buffers are the caller's, of type E,
// opaque here: the engine only hands them back to Config.HoldBuffers when
// a quarantine must keep them in flight.
//
// An Engine is safe for concurrent use; its calls share nothing but the
// pools, which lock themselves.
type Engine[E any] struct {
	drv        driver.Driver
	host       *hostmem.Pool
	dev        *devmem.Pool
	launch     *streams.Pool
	tel        *stats.Counters
	pinned     *hostmem.Registry
	tune       Tuning
	kernel     func(op string, k Kernel) (driver.Function, error)
	holdBufs   func(items []streams.Item, op string, bufs []E) []streams.Item
	mapsTables bool
	inline     driver.InlineCopier // small pageable uploads go to the driver as they are (PageableMax); nil: none
	scratch    ScratchPool[E]
}

// Kernel names one of the packed transfers' kernels.
type Kernel int

const (
	// Scatter puts a packed upload's pieces in place on the device.
	Scatter Kernel = iota
	// Gather packs a readback's pieces on the device.
	Gather
	// CopyOut writes a read into pinned host memory (kernelread.go):
	// vyre_copy_u32, (src, dst, words).
	CopyOut
)

// Config is what an Engine works with: the driver, the pools of pinned
// staging, device staging and stream leases, the counters it adds to, the
// registry of caller-pinned host memory (a call whose bytes lie inside it
// moves them by DMA directly), the tuning (zero fields: defaults), Kernel,
// which returns the scatter or gather kernel loaded on the device (called
// before a packed transfer takes anything, so a failure holds nothing),
// and HoldBuffers, which appends to items one quarantine item per buffer
// of bufs, each taking an in-flight use of its own that its Release drops.
type Config[E any] struct {
	Driver      driver.Driver
	Host        *hostmem.Pool
	Dev         *devmem.Pool
	Launch      *streams.Pool
	Counters    *stats.Counters
	Pinned      *hostmem.Registry
	Tuning      Tuning
	Kernel      func(op string, k Kernel) (driver.Function, error)
	HoldBuffers func(items []streams.Item, op string, bufs []E) []streams.Item
}

// New returns an Engine over c.
func New[E any](c Config[E]) *Engine[E] {
	e := &Engine[E]{drv: c.Driver, host: c.Host, dev: c.Dev, launch: c.Launch, tel: c.Counters, pinned: c.Pinned,
		tune: c.Tuning.WithDefaults(), kernel: c.Kernel, holdBufs: c.HoldBuffers, mapsTables: mappedTables(c.Driver)}
	if ic, ok := c.Driver.(driver.InlineCopier); ok && !c.Tuning.NoPageable && inlineCopies(c.Driver) {
		e.inline = ic
	}
	return e
}

// Tuning returns the engine's tuning, defaults filled in.
func (e *Engine[E]) Tuning() Tuning { return e.tune }

// PrewakeFor wakes the copy helpers a call of n items whose first is first
// bytes long will want, before it validates them (Tuning.PrewakeFor).
func (e *Engine[E]) PrewakeFor(n, first int) {
	t := e.tune
	t.PrewakeFor(n, first)
}

// Scratch returns pooled working memory for a call of n items; PutScratch
// gives it back.
func (e *Engine[E]) Scratch(n int) *Scratch[E] { return e.scratch.Get(n) }

// PutScratch gives sc back (ScratchPool.Put).
func (e *Engine[E]) PutScratch(sc *Scratch[E]) { e.scratch.Put(sc) }

// InUse is what a failed call's queued work may still read or write: its
// pinned staging (released by the caller's deferred release unless
// detached), its device staging (put back by the caller unless zeroed),
// the caller's buffers it targets, and the caller-pinned regions a direct
// DMA reads or writes (each holding one pending use that the quarantine
// takes over when the drain fails). Discard gives leases that do drain
// back unhealthy (their events saw the failure).
type InUse[E any] struct {
	St   []*hostmem.Staging
	Dev  []*devmem.Block
	Bufs []E
	Regs []*hostmem.Region
	// RegionsOf is a list of pending uses (a Batch's Regions) the
	// quarantine takes over like Regs; Hold clears the list, so the
	// owner's release drops none of them.
	RegionsOf *[]*hostmem.Region
	Discard   bool
}

// SyncOrQuarantine synchronizes the streams of leases after a failed call,
// so nothing their queued work uses goes back while the work may still
// run. A lease whose stream drains goes back to the pool (healthy unless
// h.Discard). When any drain fails, those leases and everything in h move
// to the quarantine (Hold). Every lease is given back or quarantined here:
// callers must not give them back again. It reports whether every stream
// drained.
func (e *Engine[E]) SyncOrQuarantine(op string, h InUse[E], leases ...*streams.Lease) bool {
	return e.launch.SyncOrQuarantine(op, h.Discard, func() streams.Hold { return e.Hold(op, h) }, leases...)
}

// Hold moves what h names out of its owners' reach, as quarantine items:
// its stagings are detached and its device staging zeroed, so the caller's
// deferred releases find nothing, and each of its buffers gets an
// in-flight use of the quarantine's own (HoldBuffers; the caller still
// drops its own); each item's release puts its thing back.
func (e *Engine[E]) Hold(op string, h InUse[E]) streams.Hold {
	var out streams.Hold
	for _, st := range h.St {
		for _, blk := range st.Detach() {
			out.Items = append(out.Items, streams.Item{Kind: streams.PinnedStaging, Bytes: uint64(blk.Size()),
				Release: func() { e.host.Return(blk) }})
		}
	}
	for _, d := range h.Dev {
		if a := *d; a.Ptr() != 0 {
			*d = devmem.Block{}
			out.Items = append(out.Items, streams.Item{Kind: streams.DeviceStaging, Bytes: a.Size(),
				Release: func() { e.dev.FreeOrKeep(a) }})
		}
	}
	if len(h.Bufs) > 0 {
		out.Items = e.holdBufs(out.Items, op, h.Bufs)
	}
	regs := h.Regs
	if h.RegionsOf != nil {
		regs = append(regs[:len(regs):len(regs)], *h.RegionsOf...)
		*h.RegionsOf = nil
	}
	for _, reg := range regs {
		out.Items = append(out.Items, streams.Item{Kind: streams.PinnedRange, Bytes: uint64(reg.Len()),
			Release: func() { e.pinned.Done(reg) }})
	}
	return out
}

// errNoPackRoom reports that a packed transfer found no device memory for
// its staging allocation, before anything was queued: the caller moves the
// copies by the per-copy path instead, which needs none. The allocation is
// rounded up to a power of two outside the resident budget (8 MiB for 4 MiB
// of data), so a nearly full device can refuse it where per-copy transfers
// still work.
var errNoPackRoom = errors.New("no device memory for packed staging")

// noPackRoom turns an out-of-memory or budget failure of the device staging
// allocation into errNoPackRoom and returns any other error as it is.
func noPackRoom(err error) error {
	var e *errs.Error
	if errors.As(err, &e) && (e.Code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY || e.Kind == errs.KindBudget) {
		return errNoPackRoom
	}
	return err
}

// inlineCopies reports whether drv says small pageable copies beat the
// staging (Capabilities.InlineCopies).
func inlineCopies(drv driver.Driver) bool {
	cr, ok := drv.(driver.CapabilityReporter)
	return ok && cr.Capabilities().InlineCopies
}

// mappedTables reports whether drv's kernels read memory from HostAlloc at
// its host address (Capabilities.MappedPinnedHost), so a packed readback's
// gather can read its table from the pinned block the host wrote it into.
// That saves the table's DMA, whose queueing took 6.3-7.8 us of W3's call
// on the reference H100 host; the gather's reads over the bus made its
// parts land about 6 us later, so the gain is small but steady: W3 in 181-233
// us against 183-252 and W7D in 1.37-1.39 ms against 1.41-1.47 (vyrecuda
// bench, 100 runs, four alternations, every pair in the same direction).
func mappedTables(drv driver.Driver) bool {
	cr, ok := drv.(driver.CapabilityReporter)
	return ok && cr.Capabilities().MappedPinnedHost
}
