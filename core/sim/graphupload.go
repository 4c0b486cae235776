package sim

import (
	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

var _ core.GraphUploader = (*Device)(nil)

// GraphUpload queues the upload of x's work to the device on s, without
// running it (core.GraphUploader): on the simulated device it runs nothing
// and only takes its place in s's order, costing one copy's overhead. Like
// GraphLaunch it refuses an unknown executable graph and a capturing
// stream.
func (d *Device) GraphUpload(x core.GraphExec, s core.Stream) error {
	const o = OpGraphUpload
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if _, ok := d.execs[x]; !ok || x == 0 {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "executable graph 0x%x is unknown or destroyed", uintptr(x))
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if st.capture != nil {
		return fail(o, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			"uploading a graph from a capturing stream is not simulated")
	}
	d.enqueue(st, &op{kind: o, cost: CopyOverhead, run: func(*Device) *Error { return nil }})
	return nil
}
