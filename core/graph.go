package core

import (
	"context"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/internal/capture"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// Graph is a Batch recorded once by Capture and replayed as one executable
// device graph: every Replay runs the batch's clears, fills, uploads, steps
// and reads with one launch and one fence, without validating, fusing or
// queueing anything again.
//
// Uploads read the current contents of the Data slices given to Capture at
// each replay (the caller may change their bytes between replays, never
// their length or backing array); reads land in Replay's dst append-style,
// as with Run.
//
// Every buffer the batch names stays in flight from Capture until Close:
// Free refuses it with ErrInFlight, and Backend.Close refuses while
// any Graph is open. The graph also owns the pinned staging its copies read
// and write, for its whole life, and holds the memory pinned through the
// Backend that its uploads read and its reads write directly (see Batch):
// PinnedBuffer.Free and UnpinHostBuffer refuse that memory until Close.
//
// A captured collective step (Step.Collective) is recorded into the graph,
// as NCCL's calls can be: each replay is a new call of its Comm, which
// must meet the other ranks' matching calls (their own graphs' replays,
// batches or Comm calls), in the order of the Comm's other calls. Comm.Close
// refuses while the Graph is open. A failed replay aborts the
// communicators, after which the Graph refuses replays (ErrClosed).
//
// A Graph is safe for concurrent use; replays of one Graph are serialized:
// Replay waits for a Replay running on another goroutine, and both Replay
// and ReplayAsync refuse with ErrInFlight while the Pending of an earlier
// ReplayAsync has not been collected (Await then AwaitInto, or Close; a
// replay without reads is collected as soon as it is observed finished).
type Graph struct {
	b  *Backend
	op string // the operation that captured it, for messages

	mu     sync.Mutex // serializes replays and Close; guards closed
	closed bool

	pl  *batchPlan      // the captured batch; pl.pinned are the graph's in-flight marks
	dev *capture.Graph  // the device graphs; nil when the batch has no device work
	up  hostmem.Staging // upload staging the graph's copies read (the reads' is pl.xfer.Rd's)
	// comms are the Comms of the batch's collective steps, in address
	// order, each holding a use of the graph until Close.
	comms []*Comm
}

// Capture validates batch like Run (same errors; nothing changes on
// refusal) and records its clears, fills, uploads, steps and reads once, by
// stream capture of the path Run queues them on, into an executable device
// graph. The transfers are recorded as Run would plan them: many small
// uploads or reads become one DMA and one scatter or gather launch, and
// copies from or into pinned memory are DMAs straight to or from it; give
// the reads' destinations in Batch.Into for that. It runs nothing on the device: it uploads the executable graph
// (when the driver can, GraphUploader) and waits for that upload, so the
// first replay costs what every other one does. Replay the Graph with
// Replay or ReplayAsync, and Close it to release what it holds.
//
// On a Backend that uses programmatic dependent launch
// (Backend.ProgrammaticLaunch), dependent steps are captured as
// programmatic graph edges: a step that waits on its grid dependencies may
// start while the step ahead of it finishes, which shortens each replay.
//
// Capture fails with ErrUnsupported when the driver cannot capture graphs
// (it names the missing entry point), and with ErrClosed after Close.
//
// Collective steps are checked as Run checks them (with
// WithCollectiveChecks, their exchange of call descriptions runs once, at
// Capture). A Capture that fails after that aborts their communicators:
// the other ranks' graphs would wait for this rank's replays.
func (b *Backend) Capture(batch Batch) (*Graph, error) {
	const op = "Capture"
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "the Backend is nil", "open one with core.Open or core.OpenCUDA")
	}
	bc, err := lockComms(context.Background(), op, b, batch.Steps)
	if err != nil {
		return nil, err
	}
	defer bc.unlock()
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	gd, err := capture.Check(op, b.drv)
	if err != nil {
		bc.refuse(op, err)
		return nil, err
	}
	// The graph keeps its own copy of the batch: callers may reuse theirs.
	pl, err := b.planBatch(op, cloneBatch(&batch), nil)
	if err != nil {
		bc.refuse(op, err)
		return nil, err
	}
	g := &Graph{b: b, op: op, pl: pl, up: hostmem.NewStaging(b.hostPool), comms: bc.list()}
	err = bc.agree(op, pl)
	if err == nil && pl.work() > 0 {
		if err = g.record(op, gd); err != nil {
			abortComms(g.comms)
		}
	}
	if err != nil {
		g.release()
		b.store.unpinEntries(op, pl.pinned)
		return nil, err
	}
	graphHold(pl.pinned, 1)
	b.graphs.Add(1)
	useComms(g.comms, 1)
	return g, nil
}

// cloneBatch copies the slices of batch (not the upload bytes, which stay
// the caller's and are read at each replay).
func cloneBatch(batch *Batch) *Batch {
	c := &Batch{
		Clears:  append([]Buffer(nil), batch.Clears...),
		Fills:   append([]Fill(nil), batch.Fills...),
		Uploads: append([]UploadAt(nil), batch.Uploads...),
		Reads:   append([]Range(nil), batch.Reads...),
		Into:    append([][]byte(nil), batch.Into...),
		Steps:   make([]Step, len(batch.Steps)),
	}
	for i, s := range batch.Steps {
		if s.Collective != nil {
			cs := *s.Collective
			s.Collective = &cs
		}
		s.Bufs = append([]Buffer(nil), s.Bufs...)
		s.Config.Scalars = append([]uint32(nil), s.Config.Scalars...)
		s.Config.Args = append([]Arg(nil), s.Config.Args...)
		c.Steps[i] = s
	}
	return c
}

// record takes the graph's staging and captures the batch on a leased
// stream into an executable graph (package capture). On failure the caller
// releases the staging and the marks; nothing was run.
func (g *Graph) record(op string, gd GraphDriver) error {
	b, pl := g.b, g.pl
	tb := &pl.xfer
	// The plan Run would choose, in one part: many small copies become one
	// DMA and a scatter or gather launch, recorded as graph nodes.
	if err := b.xfer.PlanBatch(op, tb, true); err != nil {
		return err
	}
	stage, err := b.xfer.StageBatch(op, tb, &g.up)
	if tb.Rd != nil {
		tb.Rd.Keep() // every replay lands its reads in this staging
	}
	if err != nil {
		return err
	}
	var pack capture.Pack
	if tb.UpBytes > 0 {
		starts, workers := tb.UploadStaging()
		spans, err := capture.Layout(op, tb.Ups, tb.FusedUps, starts)
		if err != nil {
			return err
		}
		t := b.xfer.Tuning()
		cp, fence := t.PackCopy()
		pack = capture.Pack{Stage: stage, Ups: tb.Ups, Spans: spans, Workers: workers, Linger: t.Linger, CopyFn: cp, Fence: fence}
		pack.Prepare()
	}
	queue := func(s Stream) error {
		if err := b.queueBatch(op, s, pl, stage, 0, 0); err != nil {
			return err
		}
		return nil
	}
	spec := capture.Spec{Queue: queue, Pack: pack, Hold: g.held}
	if tb.ReadsInParts() || tb.ReadLandsAfterLaunch() {
		// The graph gathers the packed reads but leaves their DMA out (or
		// leaves its one large read out): a blocking replay lands them in
		// parts (replay), an asynchronous one whole, after its launch.
		spec.After = func(s Stream) (string, error) { return b.xfer.QueueReadData(s, tb) }
	}
	if g.comms != nil {
		spec.Failing = func() { abortComms(g.comms) }
		spec.Guard = func(op string) (func(), error) { return guardComms(op, g.comms) }
	}
	dev, err := capture.Record(op, capture.Device{Drv: b.drv, Graphs: gd, Pool: b.launch, Log: b.log}, spec)
	if err != nil {
		return err
	}
	g.dev = dev
	return nil
}

// Replay runs the whole captured batch with one graph launch and waits for
// it with one fence. Uploads read the current contents of the Data slices
// given to Capture; the reads come back in dst's slots, one per read in
// order, append-style as with Run. On failure dst is returned unchanged,
// with every slot's header as it was. It fails with ErrClosed after Close,
// and with ErrInFlight while the Pending of a ReplayAsync is not
// collected.
//
// Many small reads that the planner packs into a block moved in parts (as
// DownloadMany does; never with WithAtomicReadbacks) are not read back by
// the graph itself: after the launch Replay brings the block over part by
// part and copies each read into its slot (or its Batch.Into destination)
// as soon as its part has landed, and the last part's landing replaces the
// fence. As with DownloadMany, a device failure after some parts landed
// may then leave some slots' storage holding their read's bytes. The same
// holds for a batch whose one read into Go memory is large enough for the
// planner to stage it (as DownloadSlice does; never with
// WithAtomicReadbacks): the graph leaves the read out, and Replay lands it
// in chunks after the launch into its Batch.Into destination or its slot's
// storage, copying each chunk out as it lands.
func (g *Graph) Replay(dst [][]byte) ([][]byte, error) {
	const op = "Graph.Replay"
	if g == nil {
		return dst, nilGraph(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dev != nil {
		return g.replay(op, dst)
	}
	w, err := g.launch(op) // nothing reaches the device; usable checks closed
	if err != nil {
		return dst, err
	}
	return w.awaitInto(op, dst)
}

// replay is Replay of a graph with device work: one launch and one stream
// synchronization on a leased stream, with no completion event or Pending
// (nothing else waits for it). Callers hold mu.
func (g *Graph) replay(op string, dst [][]byte) ([][]byte, error) {
	if err := g.usable(op); err != nil {
		return dst, err
	}
	b, pl := g.b, g.pl
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	n := len(pl.batch.Reads)
	if pl.xfer.ReadLandsAfterLaunch() {
		return g.replayLanding(op, dst)
	}
	if !pl.xfer.ReadsInParts() {
		if err := g.dev.Replay(op, func() { b.countBatch(pl) }, nil); err != nil {
			return dst, err
		}
		b.tel.SyncPoints.Add(1)
		if e := abortedUnder(op, g.comms); e != nil {
			return dst, e
		}
		return fillReads(pl.xfer.Rd, dst, pl.into, n), nil
	}
	// The packed reads land in parts after the launch, each request copied
	// into its slot's storage as its part lands; the results stay in res
	// until the replay succeeded.
	res := transfer.GetSlots(n)
	defer transfer.PutSlots(res)
	d := replayDrain(dst, pl.into, *res)
	land := func(l *streams.Lease) ([]*streams.Lease, error) { return b.xfer.LandReads(op, &pl.xfer, d, l) }
	launched := func() {
		transfer.Phase("launch")
		b.countBatch(pl)
	}
	if err := g.dev.Replay(op, launched, land); err != nil {
		return dst, err
	}
	if e := abortedUnder(op, g.comms); e != nil {
		return dst, e
	}
	out := transfer.GrowSlots(dst, n)
	copy(out, *res)
	for i, d := range pl.into {
		if d != nil {
			out[i] = d
		}
	}
	return out, nil
}

// replayLanding is replay of a graph that leaves its one read out
// (transfer.Batch.ReadLandsAfterLaunch): after the launch the read lands
// in chunks, on the launch's stream, straight into its destination given
// at Capture (Batch.Into), else into the storage of dst's first slot
// (append-style), and the last chunk's landing replaces the fence. On
// failure dst is returned, that storage perhaps holding part of the read.
// Callers hold mu and have entered the Backend.
func (g *Graph) replayLanding(op string, dst [][]byte) ([][]byte, error) {
	b, pl := g.b, g.pl
	var out []byte
	if pl.into != nil && pl.into[0] != nil {
		out = pl.into[0] // as long as the read (checkInto)
	} else {
		out = transfer.SlotDest(dst)(0, pl.xfer.Rd.Lens()[0])
	}
	land := func(l *streams.Lease) ([]*streams.Lease, error) {
		return nil, b.xfer.LandGraphRead(op, &pl.xfer, l.Stream, out)
	}
	err := g.dev.Replay(op, func() { b.countBatch(pl) }, land)
	pl.xfer.DropLanding() // after a failure, once the stream was drained
	if err != nil {
		return dst, err
	}
	if e := abortedUnder(op, g.comms); e != nil {
		return dst, e
	}
	res := transfer.GrowSlots(dst, 1)
	res[0] = out
	return res, nil
}

// replayDrain returns the drain of a replay whose packed reads land in
// parts: read i goes into the destination the batch gave it (Batch.Into,
// pl.into), else into the storage of dst's slot i, append-style
// (transfer.SlotDest), collected in res.
func replayDrain(dst, into, res [][]byte) *transfer.Drain {
	slot := transfer.SlotDest(dst)
	return &transfer.Drain{Res: res, Dest: func(i, n int) []byte {
		if into != nil && into[i] != nil {
			return into[i][:n]
		}
		return slot(i, n)
	}}
}

// ReplayAsync launches the whole captured batch like Replay and returns
// without waiting. Upload data is packed into the graph's staging before it
// returns, so the caller may change it at once. Collect the Pending with
// Await, AwaitInto (for the reads) or Close before the next replay or
// Close of this Graph, which refuse with ErrInFlight until then. With
// DispatchConfig.Timing set on any captured step, the Pending's DeviceTime
// reports the device time of the whole graph launch (timing events are
// recorded around the launch, never inside the captured work). Packed
// reads that Replay lands in parts are moved in one DMA after the launch
// here, and copied out at AwaitInto; so is a large read Replay lands in
// chunks.
func (g *Graph) ReplayAsync() (*Pending, error) {
	const op = "Graph.ReplayAsync"
	if g == nil {
		return nil, nilGraph(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	w, err := g.launch(op)
	if err != nil {
		return nil, err
	}
	return newPending(w), nil
}

func nilGraph(op string) *Error {
	return newError(op, KindInvalidArgument, "the Graph is nil", "use the Graph returned by Capture")
}

// launch packs the uploads and queues one launch of the graph on a leased
// stream. Callers hold mu.
func (g *Graph) launch(op string) (*pendingWork, error) {
	if err := g.usable(op); err != nil {
		return nil, err
	}
	b, pl := g.b, g.pl
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	p := &pendingWork{b: b, op: op, up: hostmem.NewStaging(b.hostPool), rd: pl.xfer.Rd, nReads: len(pl.batch.Reads), timing: pl.timing,
		into: pl.into, comms: g.comms}
	if g.dev == nil {
		// Nothing reaches the device (every read is empty).
		p.state = pendingSettled
		if p.rd == nil {
			p.state = pendingCollected
		}
		return p, nil
	}
	lease, err := g.dev.Launch(op, pl.timing)
	if err != nil {
		return nil, err
	}
	p.lease, p.graph = lease, g.dev
	b.countBatch(pl)
	if pl.xfer.ReadsInParts() || pl.xfer.ReadLandsAfterLaunch() {
		b.xfer.CountReadData(1, 0) // the whole block's or read's DMA (Spec.After)
	}
	return p, nil
}

// usable refuses a closed graph, and one its device graphs refuse
// (capture.Graph.Usable). Callers hold mu.
func (g *Graph) usable(op string) error {
	if g.closed {
		return newError(op, KindClosed, "the Graph is closed", "capture the batch again with Capture")
	}
	for _, c := range g.comms {
		if c.aborted() {
			return abortedCapture(op, c)
		}
	}
	if g.dev != nil {
		return g.dev.Usable(op)
	}
	return nil
}

// held is what a failed replay's work may touch, the graph's staging and
// buffers, handed to the quarantine when its stream cannot be drained.
func (g *Graph) held(op string) streams.Hold {
	tb := &g.pl.xfer
	h := held{St: []*hostmem.Staging{&g.up}, Bufs: g.pl.pinned, Dev: tb.DevStaging(), RegionsOf: &tb.Regions}
	if tb.Rd != nil {
		h.St = append(h.St, tb.Rd.Staging())
	}
	if st := tb.LandingStaging(); st != nil {
		h.St = append(h.St, st) // a replay's read landing after the launch (replayLanding)
	}
	return g.b.xfer.Hold(op, h)
}

// release gives back the staging the graph holds (host and device) and the
// pending uses of the pinned memory its direct copies touch.
func (g *Graph) release() {
	g.up.ReturnAll()
	if rd := g.pl.xfer.Rd; rd != nil {
		rd.Drop()
	}
	g.b.xfer.ReleaseBatch(&g.pl.xfer)
}

// Close destroys the device graph and releases the staging and the
// in-flight marks it holds. It refuses with ErrInFlight, changing nothing,
// while the Pending of a ReplayAsync is not collected. When the driver
// fails to destroy the graph, Close returns that failure and the Graph
// stays open, holding what it held (it may no longer replay): call Close
// again. A second Close after success returns ErrClosed.
func (g *Graph) Close() error {
	const op = "Graph.Close"
	if g == nil {
		return nilGraph(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return newError(op, KindClosed, "the Graph is already closed", "close a Graph once")
	}
	if g.dev != nil {
		if g.dev.Busy() {
			return newError(op, KindInFlight, "the Pending of a ReplayAsync has not been collected",
				"call Await and AwaitInto, or Close, on that Pending before closing the Graph")
		}
		if err := g.dev.Destroy(op); err != nil {
			return err
		}
	}
	g.closed = true
	g.release()
	graphHold(g.pl.pinned, -1)
	g.b.store.unpinEntries(op, g.pl.pinned)
	g.b.graphs.Add(-1)
	useComms(g.comms, -1)
	return nil
}

// guardComms takes the state locks of comms (in address order) for a
// graph launch, so no abort frees a communicator under it, and refuses
// (ErrClosed) when one was aborted already. release gives the locks back.
func guardComms(op string, comms []*Comm) (release func(), err error) {
	release = func() {
		for i := len(comms) - 1; i >= 0; i-- {
			comms[i].state.Unlock()
		}
	}
	for i, c := range comms {
		c.state.Lock()
		if c.c == nil {
			comms = comms[:i+1]
			release()
			return nil, abortedCapture(op, c)
		}
	}
	return release, nil
}

// abortedCapture refuses a replay of a graph whose collective step's
// communicator (c's) was aborted.
func abortedCapture(op string, c *Comm) *Error {
	return newError(op, KindClosed,
		fmt.Sprintf("the communicator of a captured collective step (rank %d of %d) was aborted after a failure", c.rank, c.size),
		"close the Graph, join a new communicator on every rank and capture again")
}
