package core

import "github.com/vyre-go/vyrecuda/cudaapi"

var _ GraphDriver = (*cudaDriver)(nil)

// StreamBeginCapture starts capturing s in relaxed mode: other goroutines'
// driver calls (which may run on any OS thread) are not restricted while it
// records.
func (d *cudaDriver) StreamBeginCapture(s Stream) error {
	return d.onStream("cuStreamBeginCapture", s, func(s cudaapi.Stream) error {
		return cudaapi.StreamBeginCapture(s, cudaapi.CU_STREAM_CAPTURE_MODE_RELAXED)
	})
}

// StreamEndCapture ends the capture on s and returns the recorded graph.
func (d *cudaDriver) StreamEndCapture(s Stream) (DeviceGraph, error) {
	const call = "cuStreamEndCapture"
	var g cudaapi.Graph
	err := d.onStream(call, s, func(s cudaapi.Stream) error {
		var err error
		g, err = cudaapi.StreamEndCapture(s)
		return err
	})
	if err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, nullResult(call)
	}
	return DeviceGraph(g), nil
}

// GraphInstantiate builds an executable graph from g.
func (d *cudaDriver) GraphInstantiate(g DeviceGraph) (GraphExec, error) {
	const call = "cuGraphInstantiateWithFlags"
	if g == 0 {
		return 0, refused(call, "null graph", "pass a graph from StreamEndCapture")
	}
	if err := d.begin(); err != nil {
		return 0, err
	}
	x, err := cudaapi.GraphInstantiateWithFlags(cudaapi.Graph(g), 0)
	if err == nil && x == 0 {
		err = nullResult(call)
	}
	d.end()
	if err != nil {
		return 0, callError(call, err)
	}
	return GraphExec(x), nil
}

// GraphLaunch queues the executable graph x on s.
func (d *cudaDriver) GraphLaunch(x GraphExec, s Stream) error {
	if x == 0 {
		return refused("cuGraphLaunch", "null executable graph", "pass one from GraphInstantiate")
	}
	return d.onStream("cuGraphLaunch", s, func(s cudaapi.Stream) error {
		return cudaapi.GraphLaunch(cudaapi.GraphExec(x), s)
	})
}

var _ GraphUploader = (*cudaDriver)(nil)

// GraphUpload queues the upload of the executable graph x on s.
func (d *cudaDriver) GraphUpload(x GraphExec, s Stream) error {
	if x == 0 {
		return refused("cuGraphUpload", "null executable graph", "pass one from GraphInstantiate")
	}
	return d.onStream("cuGraphUpload", s, func(s cudaapi.Stream) error {
		return cudaapi.GraphUpload(cudaapi.GraphExec(x), s)
	})
}

// GraphExecDestroy destroys an executable graph.
func (d *cudaDriver) GraphExecDestroy(x GraphExec) error {
	return d.onGraph("cuGraphExecDestroy", uintptr(x), func() error { return cudaapi.GraphExecDestroy(cudaapi.GraphExec(x)) })
}

// GraphDestroy destroys a graph.
func (d *cudaDriver) GraphDestroy(g DeviceGraph) error {
	return d.onGraph("cuGraphDestroy", uintptr(g), func() error { return cudaapi.GraphDestroy(cudaapi.Graph(g)) })
}

// onGraph runs a graph destroy call f with the context current, refusing a
// null handle h.
func (d *cudaDriver) onGraph(call string, h uintptr, f func() error) error {
	if h == 0 {
		return refused(call, "null graph handle", "pass a handle from StreamEndCapture or GraphInstantiate")
	}
	if err := d.begin(); err != nil {
		return err
	}
	err := f()
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}
