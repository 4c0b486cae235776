package cuda

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// StreamBeginCapture starts capturing s in relaxed mode: other goroutines'
// driver calls (which may run on any OS thread) are not restricted while it
// records.
func (d *Driver) StreamBeginCapture(s driver.Stream) error {
	return d.onStream("cuStreamBeginCapture", s, func(s cudaapi.Stream) error {
		return cudaapi.StreamBeginCapture(s, cudaapi.CU_STREAM_CAPTURE_MODE_RELAXED)
	})
}

// StreamEndCapture ends the capture on s and returns the recorded graph.
func (d *Driver) StreamEndCapture(s driver.Stream) (driver.DeviceGraph, error) {
	const call = "cuStreamEndCapture"
	if s == 0 {
		return 0, nullStream(call)
	}
	g, err := get(d, call, func() (cudaapi.Graph, error) { return cudaapi.StreamEndCapture(cudaapi.Stream(s)) })
	return driver.DeviceGraph(g), err
}

// GraphInstantiate builds an executable graph from g.
func (d *Driver) GraphInstantiate(g driver.DeviceGraph) (driver.GraphExec, error) {
	const call = "cuGraphInstantiateWithFlags"
	if g == 0 {
		return 0, refused(call, "null graph", "pass a graph from StreamEndCapture")
	}
	x, err := get(d, call, func() (cudaapi.GraphExec, error) { return cudaapi.GraphInstantiateWithFlags(cudaapi.Graph(g), 0) })
	return driver.GraphExec(x), err
}

// GraphLaunch queues the executable graph x on s.
func (d *Driver) GraphLaunch(x driver.GraphExec, s driver.Stream) error {
	if x == 0 {
		return refused("cuGraphLaunch", "null executable graph", "pass one from GraphInstantiate")
	}
	return d.onStream("cuGraphLaunch", s, func(s cudaapi.Stream) error {
		return cudaapi.GraphLaunch(cudaapi.GraphExec(x), s)
	})
}

// GraphUpload queues the upload of the executable graph x on s.
func (d *Driver) GraphUpload(x driver.GraphExec, s driver.Stream) error {
	if x == 0 {
		return refused("cuGraphUpload", "null executable graph", "pass one from GraphInstantiate")
	}
	return d.onStream("cuGraphUpload", s, func(s cudaapi.Stream) error {
		return cudaapi.GraphUpload(cudaapi.GraphExec(x), s)
	})
}

// GraphExecDestroy destroys an executable graph.
func (d *Driver) GraphExecDestroy(x driver.GraphExec) error {
	return d.onGraph("cuGraphExecDestroy", uintptr(x), func() error { return cudaapi.GraphExecDestroy(cudaapi.GraphExec(x)) })
}

// GraphDestroy destroys a graph.
func (d *Driver) GraphDestroy(g driver.DeviceGraph) error {
	return d.onGraph("cuGraphDestroy", uintptr(g), func() error { return cudaapi.GraphDestroy(cudaapi.Graph(g)) })
}

// onGraph runs a graph destroy call f with the context current, refusing a
// null handle h.
func (d *Driver) onGraph(call string, h uintptr, f func() error) error {
	if h == 0 {
		return refused(call, "null graph handle", "pass a handle from StreamEndCapture or GraphInstantiate")
	}
	return d.do(call, f)
}
