package sim

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

var _ driver.GraphDriver = (*Device)(nil)

// capture is the recording in progress on a capturing stream.
type capture struct {
	ops     []*op  // recorded work, in order
	invalid *Error // the misuse that invalidated the capture, if any
}

// graph is a recorded operation list (a CUgraph).
type graph struct{ ops []*op }

// graphExec is an executable snapshot of a graph's operation list.
type graphExec struct{ ops []*op }

// invalidate marks st's capture invalid with e and returns e: the host
// tried to wait on work that is being recorded, not run.
func (st *stream) invalidate(e *Error) *Error {
	if st.capture != nil && st.capture.invalid == nil {
		st.capture.invalid = e
	}
	return e
}

// refuseCapturing fails o on a capturing stream with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, as a
// driver does when the host synchronizes with captured work.
func refuseCapturing(o Op, st *stream) error {
	if st.capture == nil {
		return nil
	}
	return st.invalidate(fail(o, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
		"stream 0x%x is capturing: its work is recorded, not run, so it cannot be waited for", uintptr(st.handle)))
}

// StreamBeginCapture starts recording s: work queued on it from now on is
// recorded into the capture instead of queued, until StreamEndCapture. A
// stream that already captures is refused with CUDA_ERROR_ILLEGAL_STATE.
// While it captures, synchronizing or querying s, waiting on an event from
// it, or making s wait for an event fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture.
func (d *Device) StreamBeginCapture(s driver.Stream) error {
	const o = OpStreamBeginCapture
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if st.capture != nil {
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "stream 0x%x is already capturing", uintptr(s))
	}
	st.capture = &capture{}
	return nil
}

// StreamEndCapture ends the capture on s and returns a graph of the
// recorded work. An invalidated capture ends too, and fails with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph; a stream that is not
// capturing is refused with CUDA_ERROR_ILLEGAL_STATE.
func (d *Device) StreamEndCapture(s driver.Stream) (driver.DeviceGraph, error) {
	const o = OpStreamEndCapture
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return 0, err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return 0, err
	}
	c := st.capture
	if c == nil {
		return 0, fail(o, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "stream 0x%x is not capturing", uintptr(s))
	}
	st.capture = nil
	if c.invalid != nil {
		return 0, fail(o, cudaapi.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
			"the capture was invalidated by %s: %s", c.invalid.Op, c.invalid.Detail)
	}
	h := driver.DeviceGraph(d.newHandle())
	d.graphs[h] = &graph{ops: c.ops}
	return h, nil
}

// GraphInstantiate returns an executable snapshot of g; g may be destroyed
// afterwards.
func (d *Device) GraphInstantiate(g driver.DeviceGraph) (driver.GraphExec, error) {
	const o = OpGraphInstantiate
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return 0, err
	}
	gr, ok := d.graphs[g]
	if !ok || g == 0 {
		return 0, fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "graph 0x%x is unknown or destroyed", uintptr(g))
	}
	h := driver.GraphExec(d.newHandle())
	d.execs[h] = &graphExec{ops: append([]*op(nil), gr.ops...)}
	return h, nil
}

// GraphLaunch queues every operation of x on s, in recorded order, as if
// each had been queued there again: copies read and write their host and
// device memory when they execute, so a replay sees the host bytes of that
// moment. A recorded collective part becomes a new call of its
// communicator at each launch, meeting the other ranks' next calls as a
// part queued then would (a part that could not be queued then, on a
// communicator destroyed or aborted since, fails when it executes). Launching onto a capturing stream is not simulated and fails
// with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
func (d *Device) GraphLaunch(x driver.GraphExec, s driver.Stream) error {
	const o = OpGraphLaunch
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	ex, st, err := d.execTarget(o, x, s, "launching a graph into")
	if err != nil {
		return err
	}
	for _, rec := range ex.ops {
		if rec.relaunch != nil {
			rec.relaunch(st) // a collective: a new call of its communicator
			continue
		}
		d.enqueue(st, &op{kind: rec.kind, cost: rec.cost, run: rec.run})
	}
	return nil
}

// GraphExecDestroy destroys an executable graph. Launches already queued
// still run.
func (d *Device) GraphExecDestroy(x driver.GraphExec) error {
	const o = OpGraphExecDestroy
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if _, ok := d.execs[x]; !ok || x == 0 {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "executable graph 0x%x is unknown or destroyed", uintptr(x))
	}
	delete(d.execs, x)
	return nil
}

// GraphDestroy destroys a graph; executable graphs made from it live on.
func (d *Device) GraphDestroy(g driver.DeviceGraph) error {
	const o = OpGraphDestroy
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if _, ok := d.graphs[g]; !ok || g == 0 {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "graph 0x%x is unknown or destroyed", uintptr(g))
	}
	delete(d.graphs, g)
	return nil
}

// execTarget resolves the executable graph x and the stream s that
// GraphLaunch or GraphUpload (op o) queues it on: an unknown or destroyed
// graph, an unknown stream and a capturing stream are refused, the last
// with a message that starts with doing ("launching a graph into").
func (d *Device) execTarget(o Op, x driver.GraphExec, s driver.Stream, doing string) (*graphExec, *stream, error) {
	ex, ok := d.execs[x]
	if !ok || x == 0 {
		return nil, nil, fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "executable graph 0x%x is unknown or destroyed", uintptr(x))
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return nil, nil, err
	}
	if st.capture != nil {
		return nil, nil, fail(o, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			"%s a capturing stream is not simulated", doing)
	}
	return ex, st, nil
}
