package core

import (
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Every upload and readback call is planned by xferplan from its sizes and
// count: Direct (the caller's memory is pinned through this Backend),
// PerCopy (upload.go, readback.go), Packed (packed.go) or Staged
// (staged.go). The planner's cost model holds every threshold;
// core/internal/transfer holds the tuning of it, and this file the options
// that set the tuning and the Direct path.

// DefaultCopyHelperLinger is how long copy helper goroutines keep polling for
// the next copy job after a transfer call's copying ends, unless
// WithCopyHelperLinger says otherwise. It is longer than the driver work
// between the copies of back-to-back calls (a DMA, a launch and a fence,
// 0.1-0.3 ms on the reference H100 host), so a stream of calls finds its
// helpers awake: parking at once doubled the packing and unpacking of
// 1024 x 4 KiB batches there (81 to 168 us and 107 to 207 us).
const DefaultCopyHelperLinger = copyjob.DefaultLinger

// WithCopyHelperLinger sets how long the goroutines that help copy host
// memory keep polling for more work after a transfer call's copying ends:
// longer keeps them awake for the next call, at the cost of one busy core
// per helper meanwhile. A call of many items (32 or more) also wakes its
// helpers as it starts, and they poll for its copying for up to 200 us.
// Zero or a negative duration parks them at once and wakes none ahead. An
// idle process burns nothing: parked helpers use no CPU and exit after
// 100 ms without work.
func WithCopyHelperLinger(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			d = -1
			c.xfer.Prewake = -1
		}
		c.xfer.Linger, c.xfer.PipeLinger = d, d
	}
}

// WithPlanTuning bounds the transfer planner: the most copy goroutines per
// call, the sizes from which single copies are staged and many copies
// packed, the chunk sizes and staging blocks, or a set of plan kinds to
// prefer (see xferplan.Tuning). Zero fields keep their defaults. Most
// callers never need it; it exists for hosts unlike the reference one and
// for tests that run every plan at small sizes.
func WithPlanTuning(t xferplan.Tuning) Option {
	return func(c *config) { c.xfer.Plan = t }
}

// WithAtomicReadbacks, when on, makes every readback land whole in the
// Backend's staging before any byte reaches the caller's memory, so a
// failed readback never leaves a byte of the caller's storage changed. By
// default large readbacks hand their bytes over as they land, overlapping
// the copy out with the transfer: a single read staged in chunks, a read
// straight into memory pinned through this Backend, and a packed read of
// many buffers in parts may leave part of the caller's storage holding the
// device's bytes when the device fails mid-transfer (see
// DownloadResidentInto and DownloadResidentManyInto).
func WithAtomicReadbacks(on bool) Option {
	return func(c *config) { c.xfer.AtomicReads = on }
}

// WithPlanModel replaces the planner's cost model (xferplan.Reference, the
// reference H100 host's measurements) with constants measured on another
// machine.
func WithPlanModel(m xferplan.Model) Option {
	m.Copy = append([]xferplan.CopyRate(nil), m.Copy...) // the caller's slice may change later
	return func(c *config) { c.xfer.Model = &m }
}

// transferTuning is the planner's bounds and model plus the execution
// settings of the packed and staged paths (transfer.Tuning). Its zero value
// means the defaults; tests narrow it (export_transfer_test.go) so the
// simulated device runs every plan at small sizes.
type transferTuning = transfer.Tuning

// tuning returns the Backend's transfer tuning with defaults filled in.
func (b *Backend) tuning() transferTuning { return b.cfg.xfer.WithDefaults() }

// pinnedHost returns the region pinned through this Backend that holds all
// of p, with one more pending use so it cannot be freed or unpinned until
// unpinnedHost, or nil when p is not pinned memory (or empty).
func (b *Backend) pinnedHost(p []byte) *hostmem.Region {
	return b.pinned.Use(uintptr(unsafe.Pointer(unsafe.SliceData(p))), len(p))
}

// uploadDirect moves data (inside reg, pinned) to device address dst with
// one DMA and one fence. If the stream cannot be drained after a failure,
// reg keeps its pending use: the DMA may still read it, so it must not be
// freed.
func (b *Backend) uploadDirect(op string, ents []*residentEntry, reg *hostmem.Region, dst uint64, data []byte, requested int) error {
	err := b.directCopy(op, ents, reg, "MemcpyHtoDAsync", func(s Stream) error {
		return b.drv.MemcpyHtoDAsync(dst, data, s)
	})
	if err != nil {
		return err
	}
	b.tel.H2DBytes.Add(uint64(len(data)))
	b.tel.UploadOps.Add(1)
	b.tel.Requested.Add(uint64(requested))
	return nil
}

// downloadDirect moves len(out) bytes from device address src into out
// (inside reg, pinned) with one DMA and one fence. After a failure out may
// hold some of the bytes; as with uploadDirect, reg keeps its pending use
// when the stream cannot be drained, and the DMA may then write out after
// the call returned, whenever a quarantine retry synchronizes the stream
// (nothing cheaper can stop a queued DMA). The pending use keeps reg from
// being freed or unpinned until then, and Close leaves it pinned if that
// never happens.
func (b *Backend) downloadDirect(op string, ents []*residentEntry, reg *hostmem.Region, out []byte, src uint64) error {
	err := b.directCopy(op, ents, reg, "MemcpyDtoHAsync", func(s Stream) error {
		return b.drv.MemcpyDtoHAsync(out, src, s)
	})
	if err != nil {
		return err
	}
	b.tel.D2HBytes.Add(uint64(len(out)))
	b.tel.ReadbackOps.Add(1)
	b.tel.Requested.Add(1)
	return nil
}

// directCopy queues one DMA (named call, for errors) on a leased stream and
// fences it, counting the fence and the copy. reg's pending use is dropped
// unless a failed stream could not be drained.
func (b *Backend) directCopy(op string, ents []*residentEntry, reg *hostmem.Region, call string, queue func(Stream) error) error {
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		b.unpendRegion(reg)
		return err
	}
	fail := func(call string, err error) error {
		// When the drain fails the quarantine takes over reg's pending use
		// and drops it once the stream synchronizes.
		if b.syncOrQuarantine(op, inUse{ents: ents, regs: []*hostmem.Region{reg}}, lease) {
			b.unpendRegion(reg)
		}
		return driverError(op, call, err)
	}
	if err := queue(lease.Stream); err != nil {
		return fail(call, err)
	}
	if err := b.drv.StreamSynchronize(lease.Stream); err != nil {
		return fail("StreamSynchronize", err)
	}
	b.launch.Return(lease, true)
	b.unpendRegion(reg)
	b.tel.SyncPoints.Add(1)
	b.tel.DeviceCopies.Add(1)
	return nil
}

// scratchPool recycles the per-call working memory of batched transfers
// (transfer.Scratch), so a batch of n items allocates none of it in the
// steady state.
var scratchPool transfer.ScratchPool[*residentEntry]
