package driver

// DeviceGraph is a driver graph handle (CUgraph): the work recorded by a
// stream capture, not yet executable. The zero value is never valid.
type DeviceGraph uintptr

// GraphExec is an executable graph handle (CUgraphExec), instantiated from
// a DeviceGraph and launched as a whole. The zero value is never valid.
type GraphExec uintptr

// GraphDriver is an optional Driver capability, found by type assertion:
// recording the work queued on a stream into a graph, and launching that
// graph later with one call. core's Backend.Capture needs it; without it
// Capture fails with core.ErrUnsupported.
//
// While a stream captures, the work queued on it is recorded, not run; the
// host must not wait on it (no synchronization or query of the stream, and
// no event recorded on it may be waited for), or the capture is
// invalidated. Host memory named by captured copies is read or written each
// time the graph runs, so it must stay valid (and pinned) until the
// executable graph is destroyed.
type GraphDriver interface {
	// StreamBeginCapture starts recording the work queued on s. Other
	// threads' driver calls are not restricted by it (relaxed mode).
	StreamBeginCapture(s Stream) error
	// StreamEndCapture stops recording on s and returns the graph of what
	// was recorded. It ends the capture also when it fails (a capture that
	// was invalidated returns an error and no graph).
	StreamEndCapture(s Stream) (DeviceGraph, error)
	// GraphInstantiate builds an executable graph from g; g may be
	// destroyed afterwards.
	GraphInstantiate(g DeviceGraph) (GraphExec, error)
	// GraphLaunch queues the whole executable graph on s.
	GraphLaunch(x GraphExec, s Stream) error
	// GraphExecDestroy destroys an executable graph; launches already
	// queued still run.
	GraphExecDestroy(x GraphExec) error
	// GraphDestroy destroys a graph.
	GraphDestroy(g DeviceGraph) error
}

// GraphUploader is an optional Driver capability, found by type assertion
// next to GraphDriver: uploading an executable graph's work to the device
// ahead of its first launch (cuGraphUpload), so that launch does not pay
// for it. Capture uses it when present.
type GraphUploader interface {
	// GraphUpload queues the upload of x on s without running x.
	GraphUpload(x GraphExec, s Stream) error
}
