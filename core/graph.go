package core

import (
	"sync"
	"sync/atomic"

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
// FreeResident refuses it with ErrInFlight, and Backend.Close refuses while
// any Graph is open. The graph also owns the pinned staging its copies read
// and write, for its whole life.
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
	// busy is set while the Pending of a ReplayAsync is out: its work uses
	// the staging below. It is cleared (without mu) when that Pending is
	// collected.
	busy atomic.Bool
	// broken is set when a failed replay's stream could not be drained: the
	// staging moved to the Backend's quarantine with the stream.
	broken atomic.Bool

	pl    *batchPlan  // the captured batch; pl.pinned are the graph's in-flight marks
	exec  GraphExec   // 0 when the batch has no device work
	dg    DeviceGraph // the recorded graph exec came from; 0 once destroyed
	gd    GraphDriver // the driver that owns exec
	up    staging     // upload staging the graph's copies read
	rdst  staging     // read staging the graph's copies write
	stage []byte      // upload staging, pl.upBytes long
	// spans place each upload's bytes in stage (graphpack.go), found once
	// at Capture; every replay copies the current bytes there.
	spans []uploadSpan
}

// Capture validates batch like Run (same errors; nothing changes on
// refusal) and records its clears, fills, uploads, steps and reads once, by
// stream capture of the path Run queues them on, into an executable device
// graph. It runs nothing on the device: it uploads the executable graph
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
func (b *Backend) Capture(batch Batch) (*Graph, error) {
	const op = "Capture"
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "the Backend is nil", "open one with core.Open or core.OpenCUDA")
	}
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	return b.capture(op, &batch)
}

// capture builds a Graph of batch. Callers hold life.
func (b *Backend) capture(op string, batch *Batch) (*Graph, error) {
	gd, err := b.graphDriver(op)
	if err != nil {
		return nil, err
	}
	// The graph keeps its own copy of the batch: callers may reuse theirs.
	own := cloneBatch(batch)
	pl, err := b.planBatch(op, own)
	if err != nil {
		return nil, err
	}
	g := &Graph{b: b, op: op, pl: pl, gd: gd, up: newStaging(b.hostPool), rdst: newStaging(b.hostPool)}
	if pl.work() > 0 {
		if err := g.record(op); err != nil {
			g.up.release()
			g.rdst.release()
			b.unpinEntries(op, pl.pinned)
			return nil, err
		}
	}
	b.graphs.Add(1)
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
		Steps:   make([]Step, len(batch.Steps)),
	}
	for i, s := range batch.Steps {
		s.Bufs = append([]Buffer(nil), s.Bufs...)
		s.Config.Scalars = append([]uint32(nil), s.Config.Scalars...)
		s.Config.Args = append([]Arg(nil), s.Config.Args...)
		c.Steps[i] = s
	}
	return c
}

// record takes the graph's staging and captures the batch on a leased
// stream into an executable graph. On failure the caller releases the
// staging and the marks; nothing was run.
func (g *Graph) record(op string) error {
	b, pl := g.b, g.pl
	var err error
	if pl.upBytes > 0 {
		if g.spans, err = uploadLayout(pl.ups, pl.fusedUps); err != nil {
			return &Error{Op: op, Kind: KindInvalidArgument, Err: err,
				Detail: "the batch's uploads do not map onto their fused copies",
				Fix:    "report this as a bug; Run the batch instead meanwhile"}
		}
		if g.stage, err = g.up.take(op, int(pl.upBytes)); err != nil {
			return err
		}
	}
	if pl.nonEmptyReads > 0 {
		if pl.rd.stage, err = g.rdst.take(op, int(pl.fusedRds.Bytes)); err != nil {
			return err
		}
	}
	lease, err := b.lease(op, false)
	if err != nil {
		return err
	}
	s := lease.Stream
	if err := g.gd.StreamBeginCapture(s); err != nil {
		b.launch.giveBack(lease, true) // nothing was queued or recorded
		return graphError(op, "StreamBeginCapture", err)
	}
	// Nothing queued while capturing runs, so a failure needs no drain;
	// the stream may still be capturing after one, so it is destroyed.
	qerr := b.queueBatch(op, s, pl, g.stage, 0, 0)
	dg, err := g.gd.StreamEndCapture(s)
	switch {
	case qerr != nil || err != nil || dg == 0:
		b.launch.giveBack(lease, false)
		if dg != 0 {
			g.destroyGraph(op, dg)
		}
		if qerr != nil {
			return qerr
		}
		if err != nil {
			return graphError(op, "StreamEndCapture", err)
		}
		return nullSuccess(op, "StreamEndCapture")
	}
	b.launch.giveBack(lease, true)
	x, err := g.gd.GraphInstantiate(dg)
	if err == nil && x == 0 {
		err = nullSuccess(op, "GraphInstantiate")
	}
	if err != nil {
		g.destroyGraph(op, dg)
		return graphError(op, "GraphInstantiate", err)
	}
	if err := g.upload(op, x); err != nil {
		if derr := g.gd.GraphExecDestroy(x); derr != nil {
			b.log.Error("graph: executable graph could not be destroyed after a failed upload", "op", op, "err", derr)
		}
		g.destroyGraph(op, dg)
		return err
	}
	// The recorded graph is kept for Close, so that a failure to destroy
	// it is reported where it can be retried.
	g.exec, g.dg = x, dg
	return nil
}

// upload uploads the executable graph x to the device on a leased stream
// and waits for it, so the first replay does not pay for it. A driver
// without GraphUploader skips it.
func (g *Graph) upload(op string, x GraphExec) error {
	gu, ok := g.gd.(GraphUploader)
	if !ok {
		return nil
	}
	lease, err := g.b.lease(op, false)
	if err != nil {
		return err
	}
	call, err := "GraphUpload", gu.GraphUpload(x, lease.Stream)
	if err == nil {
		call, err = "StreamSynchronize", g.b.drv.StreamSynchronize(lease.Stream)
	}
	if err != nil {
		g.b.drain(op, held{}, lease) // the upload touches no staging or buffer
		return graphError(op, call, err)
	}
	g.b.launch.giveBack(lease, true)
	return nil
}

// destroyGraph destroys a recorded graph of a failed capture, logging a
// failure (the capture's own error is the one reported).
func (g *Graph) destroyGraph(op string, dg DeviceGraph) {
	if err := g.gd.GraphDestroy(dg); err != nil {
		g.b.log.Error("graph: recorded graph could not be destroyed after a failed capture", "op", op, "err", err)
	}
}

// Replay runs the whole captured batch with one graph launch and waits for
// it with one fence. Uploads read the current contents of the Data slices
// given to Capture; the reads come back in dst's slots, one per read in
// order, append-style as with Run. On failure dst is returned unchanged. It
// fails with ErrClosed after Close, and with ErrInFlight while the Pending
// of a ReplayAsync is not collected.
func (g *Graph) Replay(dst [][]byte) ([][]byte, error) {
	const op = "Graph.Replay"
	if g == nil {
		return dst, nilGraph(op)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exec != 0 {
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
	g.pack()
	lease, err := b.lease(op, false)
	if err != nil {
		return dst, err
	}
	if err := g.gd.GraphLaunch(g.exec, lease.Stream); err != nil {
		if !b.drain(op, g.held(false), lease) {
			g.broken.Store(true)
		}
		return dst, graphError(op, "GraphLaunch", err)
	}
	b.countBatch(pl)
	if err := b.drv.StreamSynchronize(lease.Stream); err != nil {
		g.replayFailed(op, lease)
		return dst, driverError(op, "StreamSynchronize", err)
	}
	b.tel.syncPoints.Add(1)
	b.launch.giveBack(lease, true)
	if pl.rd == nil {
		return transfer.GrowSlots(dst, 0), nil
	}
	return pl.rd.fill(dst, 0, len(pl.batch.Reads)), nil
}

// ReplayAsync launches the whole captured batch like Replay and returns
// without waiting. Upload data is packed into the graph's staging before it
// returns, so the caller may change it at once. Collect the Pending with
// Await, AwaitInto (for the reads) or Close before the next replay or
// Close of this Graph, which refuse with ErrInFlight until then. With
// DispatchConfig.Timing set on any captured step, the Pending's DeviceTime
// reports the device time of the whole graph launch (timing events are
// recorded around the launch, never inside the captured work).
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
	p := &pendingWork{b: b, op: op, up: newStaging(b.hostPool), rd: pl.rd, nReads: len(pl.batch.Reads), timing: pl.timing}
	if g.exec == 0 {
		// Nothing reaches the device (every read is empty).
		p.state = pendingSettled
		if p.rd == nil {
			p.state = pendingCollected
		}
		return p, nil
	}
	g.pack()
	lease, err := b.lease(op, pl.timing)
	if err != nil {
		return nil, err
	}
	s := lease.Stream
	call, err := "", error(nil)
	if pl.timing {
		call, err = "EventRecord", b.drv.EventRecord(lease.Start, s)
	}
	if err == nil {
		call, err = "GraphLaunch", g.gd.GraphLaunch(g.exec, s)
	}
	if err == nil && pl.timing {
		call, err = "EventRecord", b.drv.EventRecord(lease.End, s)
	}
	if err == nil {
		call, err = "EventRecord", b.drv.EventRecord(lease.Done, s)
	}
	if err != nil {
		if !b.drain(op, g.held(false), lease) {
			g.broken.Store(true)
		}
		return nil, graphError(op, call, err)
	}
	g.busy.Store(true)
	p.lease, p.graph = lease, g
	b.countBatch(pl)
	return p, nil
}

// usable refuses a closed, broken or busy graph. Callers hold mu.
func (g *Graph) usable(op string) error {
	switch {
	case g.closed:
		return newError(op, KindClosed, "the Graph is closed", "capture the batch again with Capture")
	case g.exec == 0 && g.dg != 0:
		return newError(op, KindDriver, "an earlier Close destroyed the executable graph and then failed",
			"call Close again")
	case g.broken.Load():
		return newError(op, KindDriver,
			"an earlier replay failed and its stream could not be drained; its staging is held until the stream synchronizes",
			"close the Graph; the device context is most likely broken")
	case g.busy.Load():
		return newError(op, KindInFlight, "the Pending of an earlier ReplayAsync has not been collected",
			"call Await and AwaitInto, or Close, on that Pending first")
	}
	return nil
}

// pack copies the current contents of the caller's upload slices into the
// graph's upload staging, where the captured copies read them, at the spans
// found at Capture (a fused copy that merges several uploads holds the
// bytes they had when it was fused, so it cannot be packed from).
func (g *Graph) pack() {
	packSpans(g.stage, g.pl.ups, g.spans)
}

// held is what a replay's work may touch: the graph's staging and buffers.
func (g *Graph) held(discard bool) held {
	return held{st: []*staging{&g.up, &g.rdst}, ents: g.pl.pinned, discard: discard}
}

// replayFailed is called by a failed replay's Pending with its lease: the
// stream is drained, and when it cannot be, the graph's staging goes to
// the quarantine and the graph refuses further replays.
func (g *Graph) replayFailed(op string, lease *launchLease) {
	if !g.b.drain(op, g.held(true), lease) {
		g.broken.Store(true)
	}
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
	if g.busy.Load() {
		return newError(op, KindInFlight, "the Pending of a ReplayAsync has not been collected",
			"call Await and AwaitInto, or Close, on that Pending before closing the Graph")
	}
	if g.exec != 0 {
		if err := g.gd.GraphExecDestroy(g.exec); err != nil {
			return graphError(op, "GraphExecDestroy", err)
		}
		g.exec = 0
	}
	if g.dg != 0 {
		if err := g.gd.GraphDestroy(g.dg); err != nil {
			return graphError(op, "GraphDestroy", err)
		}
		g.dg = 0
	}
	g.closed = true
	g.up.release()
	g.rdst.release()
	g.b.unpinEntries(op, g.pl.pinned)
	g.b.graphs.Add(-1)
	return nil
}
