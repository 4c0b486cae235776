package sim

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func hostCost(n uint64) time.Duration   { return CopyOverhead + time.Duration(n/HostBytesPerNs) }
func deviceCost(n uint64) time.Duration { return CopyOverhead + time.Duration(n/DeviceBytesPerNs) }

// checkDevice validates a device range at enqueue time.
func (d *Device) checkDevice(o Op, what string, ptr, n uint64) error {
	if _, ok := d.deviceRange(ptr, n); !ok {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE, "%s %s", what, d.rangeDetail(ptr, n))
	}
	if err := d.checkCached(o, what, ptr, n); err != nil {
		return err
	}
	return nil
}

// checkHost validates the host side of an asynchronous copy.
func (d *Device) checkHost(o Op, what string, b []byte) error {
	if !d.hostUsable(b) {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_VALUE,
			"%s [%#x, +%d) is pageable memory: asynchronous copies need memory from HostAlloc or HostRegister (or Config.AllowPageable)",
			what, addrOf(b), len(b))
	}
	if err := d.checkHostCached(o, what, b); err != nil {
		return err
	}
	return nil
}

// execDevice resolves a device range when queued work executes; the
// allocation may have been freed since the work was queued.
func (d *Device) execDevice(o Op, what string, ptr, n uint64) ([]byte, *Error) {
	b, ok := d.deviceRange(ptr, n)
	if !ok {
		return nil, fail(o, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS,
			"%s %s when the queued copy executed (freed before the stream was synchronized?)", what, d.rangeDetail(ptr, n))
	}
	if err := d.checkCached(o, what, ptr, n); err != nil {
		return nil, err
	}
	return b, nil
}

func (d *Device) execHost(o Op, what string, b []byte) *Error {
	if !d.hostUsable(b) {
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS,
			"%s [%#x, +%d) was no longer pinned or registered when the queued copy executed (freed before the stream was synchronized?)",
			what, addrOf(b), len(b))
	}
	if err := d.checkHostCached(o, what, b); err != nil {
		return err
	}
	return nil
}

// MemcpyHtoDAsync queues a copy of src to device address dst on s. The
// bytes of src are read when the copy executes, not when it is queued.
func (d *Device) MemcpyHtoDAsync(dst uint64, src []byte, s driver.Stream) error {
	return d.hostCopy(OpMemcpyHtoDAsync, src, dst, s, true, false)
}

// MemcpyHtoDInline queues a copy of src, any host memory, to device address
// dst on s, as driver.InlineCopier: the bytes are read now (the copy
// carries a snapshot), so the caller may reuse src at once. It counts and
// fails as MemcpyHtoDAsync (OpMemcpyHtoDAsync); with Capabilities.
// InlineCopies off it is refused as the real driver would not offer it.
func (d *Device) MemcpyHtoDInline(dst uint64, src []byte, s driver.Stream) error {
	if !d.caps.InlineCopies {
		return fail(OpMemcpyHtoDAsync, cudaapi.CUDA_ERROR_NOT_SUPPORTED, "inline copies are off (Capabilities.InlineCopies)")
	}
	return d.hostCopy(OpMemcpyHtoDAsync, append([]byte(nil), src...), dst, s, true, true)
}

// MemcpyDtoHAsync queues a copy of len(dst) bytes from device address src on
// s. dst is written when the copy executes, not when it is queued.
func (d *Device) MemcpyDtoHAsync(dst []byte, src uint64, s driver.Stream) error {
	return d.hostCopy(OpMemcpyDtoHAsync, dst, src, s, false, false)
}

// hostCopy queues a copy between host memory and the len(host) device bytes
// at dev: to the device when toDevice, else from it. Both sides are checked
// when the copy is queued and again when it executes, but for the host
// side of a staged copy, a snapshot the device owns.
func (d *Device) hostCopy(o Op, host []byte, dev uint64, s driver.Stream, toDevice, staged bool) error {
	hostRole, devRole := "destination", "source"
	if toDevice {
		hostRole, devRole = "source", "destination"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	n := uint64(len(host))
	if err := d.checkDevice(o, devRole, dev, n); err != nil {
		return err
	}
	if !staged {
		if err := d.checkHost(o, hostRole, host); err != nil {
			return err
		}
	}
	d.enqueue(st, &op{kind: o, cost: hostCost(n), run: func(d *Device) *Error {
		if !staged {
			if err := d.execHost(o, hostRole, host); err != nil {
				return err
			}
		}
		b, err := d.execDevice(o, devRole, dev, n)
		if err != nil {
			return err
		}
		if toDevice {
			copy(b, host)
		} else {
			copy(host, b)
		}
		return nil
	}})
	return nil
}

// MemcpyDtoDAsync queues a copy of n bytes between device addresses on s.
// Each range must lie inside one live allocation; overlapping ranges copy as
// if through a temporary buffer.
func (d *Device) MemcpyDtoDAsync(dst, src uint64, n uint64, s driver.Stream) error {
	const o = OpMemcpyDtoDAsync
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if err := d.checkCopy(o, dst, d, src, n); err != nil {
		return err
	}
	d.enqueue(st, copyOp(o, dst, d, src, n, deviceCost(n)))
	return nil
}

// checkCopy checks, when a copy is queued, that dst..dst+n lies in one live
// allocation of d and src..src+n in one of from.
func (d *Device) checkCopy(o Op, dst uint64, from *Device, src, n uint64) error {
	if err := d.checkDevice(o, "destination", dst, n); err != nil {
		return err
	}
	return from.checkDevice(o, "source", src, n)
}

// copyOp is the queued copy of n bytes from src in from's memory to dst in
// the executing device's; both ranges are checked again when it executes.
func copyOp(o Op, dst uint64, from *Device, src, n uint64, cost time.Duration) *op {
	return &op{kind: o, cost: cost, run: func(d *Device) *Error {
		to, err := d.execDevice(o, "destination", dst, n)
		if err != nil {
			return err
		}
		b, err := from.execDevice(o, "source", src, n)
		if err != nil {
			return err
		}
		copy(to, b)
		return nil
	}}
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func (d *Device) MemsetD8Async(dst uint64, v byte, n uint64, s driver.Stream) error {
	const o = OpMemsetD8Async
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if err := d.checkDevice(o, "destination", dst, n); err != nil {
		return err
	}
	d.enqueue(st, &op{kind: o, cost: deviceCost(n), run: func(d *Device) *Error {
		b, err := d.execDevice(o, "destination", dst, n)
		if err != nil {
			return err
		}
		for i := range b {
			b[i] = v
		}
		return nil
	}})
	return nil
}
