package core

import (
	"sync"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Every upload and readback call is validated here (upload.go,
// readback.go, batch.go) and executed by the Backend's transfer engine
// (core/internal/transfer): planned by xferplan from its sizes and count
// as Direct (the caller's memory is pinned through this Backend), PerCopy,
// Packed or Staged, staged, queued, fenced and counted. The planner's cost
// model holds every threshold; this file holds the options that tune it
// and builds the engine.

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

// WithKernelReads bounds the reads of a Batch that a copy kernel writes
// instead of a DMA, where the device maps pinned host memory
// (Capabilities().MappedPinnedHost): reads of minBytes to maxBytes that
// follow the batch's kernel steps, their length and device address
// multiples of 4, landing in memory from AllocHostPinned (at an address
// that is a multiple of 4) or, on their way to Go memory, in the Backend's
// staging. The kernel runs right behind the steps, where a DMA engine
// would first wait for them. Zero keeps a bound's default (64 KiB and
// 2 MiB); a negative maxBytes writes every read by DMA.
func WithKernelReads(minBytes, maxBytes int) Option {
	return func(c *config) { c.xfer.KernelReadMin, c.xfer.KernelReadMax = minBytes, maxBytes }
}

// WithAtomicReadbacks, when on, makes every readback land whole in the
// Backend's staging before any byte reaches the caller's memory, so a
// failed readback never leaves a byte of the caller's storage changed. By
// default large readbacks hand their bytes over as they land, overlapping
// the copy out with the transfer: a single read staged in chunks, a read
// straight into memory pinned through this Backend (by Download or a
// Batch), and a packed read of many buffers in parts may leave part of the
// caller's storage holding the device's bytes when the device fails
// mid-transfer (see Download, DownloadMany and Batch).
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

// xferEngine executes the Backend's transfers (core/internal/transfer) on
// its resident buffers' entries.
type xferEngine = transfer.Engine[*residentEntry]

// newXferEngine returns the transfer engine of b, whose pools, counters
// and registry are in place: its packed kernels load through b's program
// cache, and a quarantine holds b's buffers with in-flight uses of its own.
func newXferEngine(b *Backend) *xferEngine {
	return transfer.New(transfer.Config[*residentEntry]{Driver: b.drv, Host: b.hostPool, Dev: b.devPool,
		Launch: b.launch, Counters: &b.tel, Pinned: &b.pinned, Tuning: b.cfg.xfer,
		Kernel: func(op string, k transfer.Kernel) (Function, error) {
			p := packedPrograms()
			switch k {
			case transfer.Gather:
				return b.function(op, p.gather)
			case transfer.CopyOut:
				return b.function(op, ProgramCopyU32())
			}
			return b.function(op, p.scatter)
		},
		HoldBuffers: func(items []streams.Item, op string, ents []*residentEntry) []streams.Item {
			return refItems(items, b, op, ents)
		}})
}

type packedSet struct{ scatter, gather *Program }

// packedPrograms are the scatter and gather kernels of packed transfers as
// Programs, so they load once per Backend through its module cache (one
// module: they share an image), unload at Close, and run their Go twins
// on the simulated device.
var packedPrograms = sync.OnceValue(func() packedSet {
	mk := func(entry string, host HostKernel) *Program {
		p, err := NewProgram(ProgramSpec{Image: kernels.ScatterPTX, Entry: entry, Block: transfer.PackBlockThreads,
			Grid: GridRule{Blocks: 1}, Buffers: 2, Scalars: 1, Host: host})
		if err != nil {
			// The specs are constants of this file; a failure is a bug here.
			panic(err)
		}
		return p
	}
	return packedSet{scatter: mk(kernels.ScatterEntry, transfer.ScatterTwin), gather: mk(kernels.GatherEntry, transfer.GatherTwin)}
})
