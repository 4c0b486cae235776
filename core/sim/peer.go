package sim

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// PeerBytesPerNs is the simulated bandwidth of peer copies: 300 GB/s, an
// NVLink figure.
const PeerBytesPerNs = 300

const cudaInvalidDevice = cudaapi.CUDA_ERROR_INVALID_DEVICE

var _ driver.PeerDriver = (*Device)(nil)

func peerCost(n uint64) time.Duration { return CopyOverhead + time.Duration(n/PeerBytesPerNs) }

// PeerLink reports how d reaches peer's memory: PeerSame for d itself,
// otherwise what the Machine's peer matrix says. A peer that is not a
// device of d's Machine fails with CUDA_ERROR_INVALID_DEVICE.
func (d *Device) PeerLink(peer driver.Driver) (driver.PeerLink, error) {
	const o = OpPeerLink
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return driver.PeerNone, err
	}
	p, err := d.peerOf(o, peer)
	if err != nil {
		return driver.PeerNone, err
	}
	switch {
	case p == d:
		return driver.PeerSame, nil
	case d.machine.peer[d.index][p.index]:
		return driver.PeerDirect, nil
	}
	return driver.PeerNone, nil
}

// EnablePeerAccess lets work queued on d read and write peer's memory. It
// fails with CUDA_ERROR_PEER_ACCESS_UNSUPPORTED where the peer matrix says
// no, and with CUDA_ERROR_INVALID_DEVICE for d itself; enabling again
// succeeds.
func (d *Device) EnablePeerAccess(peer driver.Driver) error {
	const o = OpEnablePeerAccess
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	p, err := d.peerOf(o, peer)
	if err != nil {
		return err
	}
	if p == d {
		return fail(o, cudaInvalidDevice, "a device cannot enable peer access to itself")
	}
	if !d.machine.peer[d.index][p.index] {
		return fail(o, cudaapi.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
			"device %d cannot access device %d (Machine peer matrix)", d.index, p.index)
	}
	if d.peerOn == nil {
		d.peerOn = make(map[*Device]bool)
	}
	d.peerOn[p] = true
	return nil
}

// MemcpyPeerAsync queues on s (a stream of d) a copy of n bytes from src in
// peer's memory to dst in d's. Unlike CUDA, which would stage the copy
// itself, the simulated device refuses it with
// CUDA_ERROR_PEER_ACCESS_NOT_ENABLED unless peer is d or d enabled access
// to peer, so a caller that forgot to enable access is caught.
func (d *Device) MemcpyPeerAsync(dst uint64, peer driver.Driver, src uint64, n uint64, s driver.Stream) error {
	const o = OpMemcpyPeerAsync
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return err
	}
	p, err := d.peerOf(o, peer)
	if err != nil {
		return err
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if err := d.checkCopy(o, dst, p, src, n); err != nil {
		return err
	}
	if p != d && !d.peerOn[p] {
		return fail(o, cudaapi.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
			"device %d has not enabled access to device %d; call EnablePeerAccess first", d.index, p.index)
	}
	d.enqueue(st, copyOp(o, dst, p, src, n, peerCost(n)))
	return nil
}
