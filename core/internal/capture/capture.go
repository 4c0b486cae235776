// Package capture owns the CUDA graphs of captured batches: recording the
// work its caller queues on a leased stream into a device graph by stream
// capture, instantiating the executable graph and uploading it ahead of the
// first launch, launching it (a blocking replay with one fence, or an
// asynchronous one its caller collects), draining or quarantining the
// stream of a failed replay, and destroying both graphs; and the packed
// upload table that copies the caller's current upload bytes into the
// graph's staging before each launch (pack.go).
//
// It works on driver handles (driver.GraphDriver, driver.DeviceGraph,
// driver.GraphExec, driver.Stream), on leases of a streams.Pool, and on
// callbacks: the caller queues the batch while the stream captures, and
// names what a failed replay's work may still use. It never validates,
// plans or stages a batch, never touches resident buffers, staging pools or
// counters, and must not import core: package core owns those and decides
// when a graph is captured, replayed and closed.
package capture

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// entryPoints names the driver entry points driver.GraphDriver stands for.
const entryPoints = "cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags, cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy"

// Check returns drv's driver.GraphDriver, or a KindUnsupported error
// naming what is missing: drv does not implement it, or reports (as a
// driver.CapabilityReporter) that it offers no graphs.
func Check(op string, drv driver.Driver) (driver.GraphDriver, error) {
	gd, ok := drv.(driver.GraphDriver)
	if !ok {
		return nil, errs.New(op, errs.KindUnsupported,
			fmt.Sprintf("the driver (%T) does not implement core.GraphDriver (%s)", drv, entryPoints),
			"use Run, or a driver with graph support (core.OpenCUDA's, or core/sim's)")
	}
	if cr, ok := drv.(driver.CapabilityReporter); ok {
		if c := cr.Capabilities(); !c.Graphs {
			return nil, errs.New(op, errs.KindUnsupported,
				fmt.Sprintf("the driver (%s) does not offer graphs (%s)", c, entryPoints),
				"use Run, or update the NVIDIA driver to one with CUDA graphs (CUDA 11.4 or newer)")
		}
	}
	return gd, nil
}

// Device is what a Graph runs on: the driver (stream synchronization and
// events), its graph calls, the pool its streams are leased from, and the
// log that reports failures another error hides (nil discards them).
type Device struct {
	Drv    driver.Driver
	Graphs driver.GraphDriver
	Pool   *streams.Pool
	Log    *slog.Logger
}

// Spec is what Record captures: Queue queues the batch on the capturing
// stream it is given (it must not wait on that stream, nor synchronize or
// query it), Pack is copied before every launch, and Hold names, for the
// op of a failed replay, what that replay's work may still use: it goes to
// the pool's quarantine with the stream when the stream cannot be drained
// (nil: nothing). Failing, when set, is called when a launch fails, before
// its stream is drained: the caller ends there what the captured work may
// wait for forever (it aborts the communicators of captured collectives,
// whose other ranks would otherwise wait for this one). Guard, when set, is
// called before each GraphLaunch, for op: its error refuses the launch
// (nothing is queued, and Failing is not called), and the release it
// returns is called once GraphLaunch has returned, before Failing (the
// caller keeps the captured communicators from being aborted under a
// launch, and refuses one already aborted).
//
// After, when set, queues on the stream of each asynchronous launch
// (Launch), behind the graph and its timing events, what the graph leaves
// out and that launch needs (core: the data DMA of packed reads that a
// blocking replay lands in parts, Land); it returns the failed call.
type Spec struct {
	Queue   func(s driver.Stream) error
	Pack    Pack
	Hold    func(op string) streams.Hold
	Failing func()
	Guard   func(op string) (release func(), err error)
	After   func(s driver.Stream) (call string, err error)
}

// Land brings over, after a blocking replay's launch, output the graph
// leaves on the device, queued on the launch's stream (lease's), and waits
// for it: once it returns nil, everything queued on that stream has
// finished. It returns the leases it took besides lease (for their
// events), which go back with lease: healthy on success, drained with it
// on failure (a failed Land's error is the replay's).
type Land func(lease *streams.Lease) (extra []*streams.Lease, err error)

// guard calls Spec.Guard for op (a nil Guard allows every launch).
func (g *Graph) guard(op string) (release func(), err error) {
	if g.spec.Guard == nil {
		return func() {}, nil
	}
	return g.spec.Guard(op)
}

// Graph is one captured batch: its recorded device graph and the
// executable graph instantiated from it. Launches of one Graph must be
// serialized by the caller; Busy, Collected and the failure marks may be
// used from any goroutine.
type Graph struct {
	dev  Device
	spec Spec
	exec driver.GraphExec   // 0 once destroyed
	dg   driver.DeviceGraph // 0 once destroyed
	// busy is set while the work of an asynchronous launch is out: it uses
	// the staging Pack fills. Collected clears it.
	busy atomic.Bool
	// broken is set when a failed launch's stream could not be drained:
	// what Spec.Hold names went to the quarantine with the stream.
	broken atomic.Bool
}

// Record captures what spec.Queue queues on a stream leased from
// dev.Pool into a device graph, instantiates it, and uploads the
// executable graph (when dev.Graphs is a driver.GraphUploader), waiting
// for that upload, so the first launch costs what every other one does.
// Nothing runs on the device but the upload. On failure everything Record
// made is destroyed and its leases go back; the caller's staging is its own.
func Record(op string, dev Device, spec Spec) (*Graph, error) {
	if dev.Log == nil {
		dev.Log = slog.New(slog.DiscardHandler)
	}
	g := &Graph{dev: dev, spec: spec}
	lease, err := dev.Pool.Lease(op, false)
	if err != nil {
		return nil, err
	}
	s := lease.Stream
	if err := dev.Graphs.StreamBeginCapture(s); err != nil {
		dev.Pool.Return(lease, true) // nothing was queued or recorded
		return nil, errs.Graph(op, "StreamBeginCapture", err)
	}
	// Nothing queued while capturing runs, so a failure needs no drain;
	// the stream may still be capturing after one, so it is destroyed.
	qerr := spec.Queue(s)
	dg, err := dev.Graphs.StreamEndCapture(s)
	switch {
	case qerr != nil || err != nil || dg == 0:
		dev.Pool.Return(lease, false)
		if dg != 0 {
			g.destroyRecorded(op, dg)
		}
		if qerr != nil {
			return nil, qerr
		}
		if err != nil {
			return nil, errs.Graph(op, "StreamEndCapture", err)
		}
		return nil, errs.NullSuccess(op, "StreamEndCapture")
	}
	dev.Pool.Return(lease, true)
	x, err := dev.Graphs.GraphInstantiate(dg)
	if err == nil && x == 0 {
		err = errs.NullSuccess(op, "GraphInstantiate")
	}
	if err != nil {
		g.destroyRecorded(op, dg)
		return nil, errs.Graph(op, "GraphInstantiate", err)
	}
	if err := g.upload(op, x); err != nil {
		if derr := dev.Graphs.GraphExecDestroy(x); derr != nil {
			dev.Log.Error("graph: executable graph could not be destroyed after a failed upload", "op", op, "err", derr)
		}
		g.destroyRecorded(op, dg)
		return nil, err
	}
	// The recorded graph is kept for Destroy, so that a failure to destroy
	// it is reported where it can be retried.
	g.exec, g.dg = x, dg
	return g, nil
}

// upload uploads the executable graph x to the device on a leased stream
// and waits for it. A driver without GraphUploader skips it.
func (g *Graph) upload(op string, x driver.GraphExec) error {
	gu, ok := g.dev.Graphs.(driver.GraphUploader)
	if !ok {
		return nil
	}
	lease, err := g.dev.Pool.Lease(op, false)
	if err != nil {
		return err
	}
	call, err := "GraphUpload", gu.GraphUpload(x, lease.Stream)
	if err == nil {
		call, err = "StreamSynchronize", g.dev.Drv.StreamSynchronize(lease.Stream)
	}
	if err != nil {
		// The upload touches no staging or buffer: nothing to hold.
		g.dev.Pool.SyncOrQuarantine(op, false, nil, lease)
		return errs.Graph(op, call, err)
	}
	g.dev.Pool.Return(lease, true)
	return nil
}

// destroyRecorded destroys the recorded graph of a failed capture, logging
// a failure (the capture's own error is the one reported).
func (g *Graph) destroyRecorded(op string, dg driver.DeviceGraph) {
	if err := g.dev.Graphs.GraphDestroy(dg); err != nil {
		g.dev.Log.Error("graph: recorded graph could not be destroyed after a failed capture", "op", op, "err", err)
	}
}

// Usable refuses a Graph that cannot launch now: one whose executable
// graph an earlier Destroy destroyed before failing, one broken by a
// failed launch whose stream did not drain, and one whose asynchronous
// launch is not collected (KindInFlight).
func (g *Graph) Usable(op string) error {
	switch {
	case g.exec == 0 && g.dg != 0:
		return errs.New(op, errs.KindDriver, "an earlier Close destroyed the executable graph and then failed",
			"call Close again")
	case g.broken.Load():
		return errs.New(op, errs.KindDriver,
			"an earlier replay failed and its stream could not be drained; its staging is held until the stream synchronizes",
			"close the Graph; the device context is most likely broken")
	case g.busy.Load():
		return errs.New(op, errs.KindInFlight, "the Pending of an earlier ReplayAsync has not been collected",
			"call Await and AwaitInto, or Close, on that Pending first")
	}
	return nil
}

// Busy reports whether the work of an asynchronous launch is not collected.
func (g *Graph) Busy() bool { return g.busy.Load() }

// Replay packs the uploads, launches the graph on a leased stream and
// synchronizes that stream: one launch and one fence, with no completion
// event (nothing else waits for it). With land set, land waits for the
// stream instead of the fence (see Land). launched is called once the
// launch is queued. On failure Spec.Failing is called and the stream (and
// those of the leases land took) is drained (or quarantined with what
// Spec.Hold names, which breaks the Graph) and the leases go back.
func (g *Graph) Replay(op string, launched func(), land Land) error {
	g.spec.Pack.Copy()
	lease, err := g.dev.Pool.Lease(op, false)
	if err != nil {
		return err
	}
	release, err := g.guard(op)
	if err != nil {
		g.dev.Pool.Return(lease, true) // nothing was queued
		return err
	}
	err = g.dev.Graphs.GraphLaunch(g.exec, lease.Stream)
	release()
	if err != nil {
		g.drain(op, false, lease)
		return errs.Graph(op, "GraphLaunch", err)
	}
	launched()
	if land != nil {
		extra, err := land(lease)
		if err != nil {
			g.drain(op, true, append(extra, lease)...)
			return err
		}
		for _, l := range append(extra, lease) {
			g.dev.Pool.Return(l, true)
		}
		return nil
	}
	if err := g.dev.Drv.StreamSynchronize(lease.Stream); err != nil {
		g.Failed(op, lease)
		return errs.Driver(op, "StreamSynchronize", err)
	}
	g.dev.Pool.Return(lease, true)
	return nil
}

// Launch packs the uploads and queues one launch of the graph on a leased
// stream, followed by a record of the lease's completion event; with
// timing, the lease's timing events are recorded around the launch, never
// inside the captured work; Spec.After's work goes after them, before the
// completion event. The Graph is busy until Collected; the caller
// waits for the lease's stream or event and gives the lease back (or
// passes it to Failed). On failure Spec.Failing is called and the stream
// is drained (or quarantined, which breaks the Graph) and nothing is busy.
func (g *Graph) Launch(op string, timing bool) (*streams.Lease, error) {
	g.spec.Pack.Copy()
	lease, err := g.dev.Pool.Lease(op, timing)
	if err != nil {
		return nil, err
	}
	release, err := g.guard(op)
	if err != nil {
		g.dev.Pool.Return(lease, true) // nothing was queued
		return nil, err
	}
	s, drv := lease.Stream, g.dev.Drv
	call := ""
	if timing {
		call, err = "EventRecord", drv.EventRecord(lease.Start, s)
	}
	if err == nil {
		call, err = "GraphLaunch", g.dev.Graphs.GraphLaunch(g.exec, s)
	}
	release()
	if err == nil && timing {
		call, err = "EventRecord", drv.EventRecord(lease.End, s)
	}
	if err == nil && g.spec.After != nil {
		call, err = g.spec.After(s)
	}
	if err == nil {
		call, err = "EventRecord", drv.EventRecord(lease.Done, s)
	}
	if err != nil {
		g.drain(op, false, lease)
		return nil, errs.Graph(op, call, err)
	}
	g.busy.Store(true)
	return lease, nil
}

// Collected marks the work of an asynchronous launch collected: the
// staging is free for the next launch.
func (g *Graph) Collected() { g.busy.Store(false) }

// Failed calls Spec.Failing and drains the stream of lease after a
// launch's work failed, giving the lease back unhealthy; when the stream
// cannot be drained, the lease and what Spec.Hold names go to the
// quarantine and the Graph is broken.
func (g *Graph) Failed(op string, lease *streams.Lease) {
	g.drain(op, true, lease)
}

func (g *Graph) drain(op string, discard bool, leases ...*streams.Lease) {
	if g.spec.Failing != nil {
		g.spec.Failing()
	}
	var hold func() streams.Hold
	if g.spec.Hold != nil {
		hold = func() streams.Hold { return g.spec.Hold(op) }
	}
	if !g.dev.Pool.SyncOrQuarantine(op, discard, hold, leases...) {
		g.broken.Store(true)
	}
}

// Destroy destroys the executable graph, then the recorded one. When the
// driver fails, Destroy returns that failure and keeps what is left, so a
// later call retries it (the Graph no longer launches once its executable
// graph is gone). Destroying a destroyed Graph does nothing.
func (g *Graph) Destroy(op string) error {
	if g.exec != 0 {
		if err := g.dev.Graphs.GraphExecDestroy(g.exec); err != nil {
			return errs.Graph(op, "GraphExecDestroy", err)
		}
		g.exec = 0
	}
	if g.dg != 0 {
		if err := g.dev.Graphs.GraphDestroy(g.dg); err != nil {
			return errs.Graph(op, "GraphDestroy", err)
		}
		g.dg = 0
	}
	return nil
}
