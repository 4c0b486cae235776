package sim

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

var _ driver.PageableCopier = (*Device)(nil)

// MemcpyHtoD copies src (any host memory) to device address dst at once, as
// the driver's synchronous copy does. Like the real one with the Backend's
// non-blocking streams, it is not ordered against work queued on them.
func (d *Device) MemcpyHtoD(dst uint64, src []byte) error {
	return d.syncCopy(OpMemcpyHtoD, src, dst, true)
}

// MemcpyDtoH copies len(dst) bytes from device address src into dst (any
// host memory) at once.
func (d *Device) MemcpyDtoH(dst []byte, src uint64) error {
	return d.syncCopy(OpMemcpyDtoH, dst, src, false)
}

func (d *Device) syncCopy(o Op, host []byte, dev uint64, toDevice bool) error {
	role := "source"
	if toDevice {
		role = "destination"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	if len(host) == 0 {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "0 bytes")
	}
	b, ok := d.deviceRange(dev, uint64(len(host)))
	if !ok {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "%s %s", role, d.rangeDetail(dev, uint64(len(host))))
	}
	if toDevice {
		copy(b, host)
	} else {
		copy(host, b)
	}
	return nil
}
