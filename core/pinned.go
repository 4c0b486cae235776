package core

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// PinnedBuffer is page-locked host memory allocated through a Backend, for
// callers that fill it directly and upload from it with
// UploadAsync. It stays valid until Free or the Backend's Close.
type PinnedBuffer struct {
	b   *Backend
	reg *hostmem.Region
}

// AllocHostPinned allocates n bytes of page-locked host memory. Fill Bytes()
// and upload from it with UploadAsync; Free it when done (Close
// frees what is left).
func (b *Backend) AllocHostPinned(n int) (*PinnedBuffer, error) {
	const op = "AllocHostPinned"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	if n <= 0 {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("requested %d bytes", n), "request at least 1 byte")
	}
	buf, err := b.drv.HostAlloc(uint64(n))
	if err != nil {
		return nil, driverError(op, "HostAlloc", err)
	}
	if len(buf) == 0 {
		return nil, nullSuccess(op, "HostAlloc")
	}
	if len(buf) != n {
		if ferr := b.drv.HostFree(unsafe.Pointer(unsafe.SliceData(buf))); ferr != nil {
			b.log.Error("freeing a wrongly sized pinned allocation failed", "op", op, "err", ferr)
		}
		return nil, newError(op, KindDriver, fmt.Sprintf("HostAlloc returned %d bytes for a request of %d", len(buf), n),
			"the driver misbehaved; report it with the driver version")
	}
	reg, err := b.pinned.AddAlloc(buf)
	if err != nil {
		if ferr := b.drv.HostFree(unsafe.Pointer(unsafe.SliceData(buf))); ferr != nil {
			b.log.Error("freeing an overlapping pinned allocation failed", "op", op, "err", ferr)
		}
		return nil, newError(op, KindDriver, fmt.Sprintf("HostAlloc returned %#x, inside memory already pinned", uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
			"the driver misbehaved; report it with the driver version")
	}
	return &PinnedBuffer{b: b, reg: reg}, nil
}

// Bytes returns the buffer's memory, or nil once it has been freed (by Free
// or by the Backend's Close) and for a nil PinnedBuffer. Do not keep the
// slice past Free.
func (p *PinnedBuffer) Bytes() []byte {
	if p == nil {
		return nil
	}
	return p.b.pinned.Bytes(p.reg)
}

// Len returns the buffer's length in bytes (0 for a nil PinnedBuffer).
func (p *PinnedBuffer) Len() int {
	if p == nil {
		return 0
	}
	return p.reg.Len()
}

// Pointer returns the address of the buffer's first byte, for
// UploadAsync (nil for a nil PinnedBuffer).
func (p *PinnedBuffer) Pointer() unsafe.Pointer {
	if p == nil {
		return nil
	}
	return p.reg.Pointer()
}

// Free returns the buffer's memory to the driver. It refuses with ErrInFlight
// while asynchronous uploads from it are queued, while a batch that moves
// data from or into it by DMA is not collected (a Pending) or closed (a
// Graph), or while a failed direct transfer whose stream could not be
// synchronized may still use it (Free retries that stream first), with ErrUnknownHandle when already freed, and with
// ErrClosed after the Backend's Close (which freed it). If the driver
// fails, the buffer stays allocated.
func (p *PinnedBuffer) Free() error {
	const op = "PinnedBuffer.Free"
	if p == nil {
		return newError(op, KindInvalidArgument, "the PinnedBuffer is nil",
			"free the PinnedBuffer AllocHostPinned returned, after checking its error")
	}
	b := p.b
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	err := b.pinned.Free(p.reg, settleFor(b.launch), b.drv.HostFree)
	var busy *hostmem.InUseError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hostmem.ErrGone):
		return newError(op, KindUnknownHandle, fmt.Sprintf("pinned buffer at %#x (%d bytes) was already freed", p.reg.Start(), p.reg.Len()),
			"free each pinned buffer once")
	case errors.As(err, &busy):
		return newError(op, KindInFlight, fmt.Sprintf("%d queued copy(ies) use pinned buffer at %#x (asynchronous uploads, batches not collected, open Graphs, or a failed transfer whose stream could not be synchronized)", busy.Pending, p.reg.Start()),
			"call SynchronizeUploads, collect the Pending (AwaitInto or Close) or Close the Graph that uses it before freeing it (after a failed transfer, once the device recovers)")
	}
	return driverError(op, "HostFree", err)
}

// settleFor returns the settle step of the registry's Free and Unregister:
// it retries launch's quarantine when that holds anything, for a pinned
// region whose queued uses a quarantined direct copy may hold (its release
// takes the registry's lock, so the registry calls it without).
func settleFor(launch *streams.Pool) func() {
	return func() {
		if launch.QuarantinedLeases() > 0 {
			launch.RetryQuarantine()
		}
	}
}

// PinHostBuffer page-locks n bytes of caller memory starting at p (memory
// from C, mmap or a Go allocation kept alive by the caller), so
// UploadAsync can copy from it. The memory must stay valid until
// UnpinHostBuffer or the Backend's Close. Ranges must not overlap ones
// already pinned through this Backend.
func (b *Backend) PinHostBuffer(p unsafe.Pointer, n int) error {
	const op = "PinHostBuffer"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	if p == nil {
		return newError(op, KindInvalidArgument, "pointer is nil", "pass the first byte of the memory to pin")
	}
	if n <= 0 {
		return newError(op, KindInvalidArgument, fmt.Sprintf("length %d bytes", n), "pin at least 1 byte")
	}
	start := uintptr(p)
	if _, err := accounting.AddUint64(uint64(start), uint64(n)); err != nil || uint64(start)+uint64(n) > uint64(^uintptr(0)) {
		return newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes at %#x wrap the address space", n, start),
			"pass a valid address and length")
	}
	// The driver call runs under the registry's lock so no overlapping
	// range can be registered between the check and the insert;
	// registration does not wait on any stream.
	err := b.pinned.Register(p, n, b.drv.HostRegister)
	if errors.Is(err, hostmem.ErrOverlap) {
		return newError(op, KindInvalidArgument, fmt.Sprintf("[%#x, %#x) overlaps memory already pinned through this Backend", start, uint64(start)+uint64(n)),
			"pin each range once, or unpin it first")
	}
	if err != nil {
		return driverError(op, "HostRegister", err)
	}
	return nil
}

// UnpinHostBuffer undoes PinHostBuffer for the range starting at p. It
// refuses with ErrInFlight while asynchronous uploads from the range are
// queued, while a batch that moves data from or into it by DMA is not
// collected (a Pending) or closed (a Graph), or while a failed direct
// transfer whose stream could not be synchronized may still use it (it
// retries that stream first), and with
// ErrInvalidArgument when p does not start a range pinned with
// PinHostBuffer on this Backend.
func (b *Backend) UnpinHostBuffer(p unsafe.Pointer) error {
	const op = "UnpinHostBuffer"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	start := uintptr(p)
	err := b.pinned.Unregister(p, settleFor(b.launch), b.drv.HostUnregister)
	var busy *hostmem.InUseError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hostmem.ErrNotRegistered):
		return newError(op, KindInvalidArgument, fmt.Sprintf("address %#x does not start a range pinned with PinHostBuffer on this Backend", start),
			"pass the pointer given to PinHostBuffer; free AllocHostPinned buffers with their Free method")
	case errors.As(err, &busy):
		return newError(op, KindInFlight, fmt.Sprintf("%d queued copy(ies) use the range at %#x (asynchronous uploads, batches not collected, open Graphs, or a failed transfer whose stream could not be synchronized)", busy.Pending, start),
			"call SynchronizeUploads, collect the Pending (AwaitInto or Close) or Close the Graph that uses it before unpinning (after a failed transfer, once the device recovers)")
	}
	return driverError(op, "HostUnregister", err)
}
