package sim

import (
	"github.com/vyre-go/vyrecuda/core/driver"
)

var _ driver.GraphUploader = (*Device)(nil)

// GraphUpload queues the upload of x's work to the device on s, without
// running it (driver.GraphUploader): on the simulated device it runs nothing
// and only takes its place in s's order, costing one copy's overhead. Like
// GraphLaunch it refuses an unknown executable graph and a capturing
// stream.
func (d *Device) GraphUpload(x driver.GraphExec, s driver.Stream) error {
	const o = OpGraphUpload
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	_, st, err := d.execTarget(o, x, s, "uploading a graph from")
	if err != nil {
		return err
	}
	d.enqueue(st, &op{kind: o, cost: CopyOverhead, run: func(*Device) *Error { return nil }})
	return nil
}
