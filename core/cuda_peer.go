package core

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

var _ PeerDriver = (*cudaDriver)(nil)

// liveCUDADrivers lists the open real drivers of the process, so one may
// accept page-locked memory another allocated or registered: all of it is
// portable (CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE), usable
// from every context.
var liveCUDADrivers struct {
	mu   sync.RWMutex
	list []*cudaDriver
}

func trackCUDADriver(d *cudaDriver) {
	liveCUDADrivers.mu.Lock()
	liveCUDADrivers.list = append(liveCUDADrivers.list, d)
	liveCUDADrivers.mu.Unlock()
}

func untrackCUDADriver(d *cudaDriver) {
	liveCUDADrivers.mu.Lock()
	defer liveCUDADrivers.mu.Unlock()
	for i, o := range liveCUDADrivers.list {
		if o == d {
			liveCUDADrivers.list = append(liveCUDADrivers.list[:i], liveCUDADrivers.list[i+1:]...)
			return
		}
	}
}

// lockPeerPinned looks for [p, p+n) in the page-locked ranges of the other
// open drivers. When one holds it, that driver's hostMu stays read-locked
// (so the range cannot be freed under the copy) until the returned unlock
// runs; found is false otherwise. d.hostMu must not be held by the caller
// exclusively.
func (d *cudaDriver) lockPeerPinned(b []byte) (unlock func(), found bool) {
	p, n := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))
	liveCUDADrivers.mu.RLock()
	defer liveCUDADrivers.mu.RUnlock()
	for _, o := range liveCUDADrivers.list {
		if o == d {
			continue
		}
		o.hostMu.RLock()
		if o.host.contains(p, n) {
			return o.hostMu.RUnlock, true
		}
		o.hostMu.RUnlock()
	}
	return nil, false
}

// lockPinned checks that b is page-locked memory of d or of another open
// driver and keeps the owner's hostMu read-locked until unlock runs, so a
// concurrent HostFree cannot slip between the check and the copy.
func (d *cudaDriver) lockPinned(call, what string, b []byte) (unlock func(), err error) {
	d.hostMu.RLock()
	err = d.checkPinned(call, what, b)
	if err == nil {
		return d.hostMu.RUnlock, nil
	}
	d.hostMu.RUnlock()
	if unlock, ok := d.lockPeerPinned(b); ok {
		return unlock, nil
	}
	return nil, err
}

// peerOf resolves a peer Driver to an open real driver.
func (d *cudaDriver) peerOf(call string, peer Driver) (*cudaDriver, error) {
	p, ok := peer.(*cudaDriver)
	if !ok || p == nil {
		return nil, refused(call, fmt.Sprintf("peer %T is not a CUDA driver", peer),
			"pass a driver from NewCUDADriver (or a Backend from OpenCUDA)")
	}
	return p, nil
}

// PeerLink reports PeerSame when peer holds the same context (the same
// device: both retain its primary context), else what
// cuDeviceCanAccessPeer says.
func (d *cudaDriver) PeerLink(peer Driver) (PeerLink, error) {
	const call = "cuDeviceCanAccessPeer"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return PeerNone, err
	}
	if p.ctx == d.ctx {
		return PeerSame, nil
	}
	if err := d.begin(); err != nil {
		return PeerNone, err
	}
	can, err := cudaapi.DeviceCanAccessPeer(d.dev, p.dev)
	d.end()
	if err != nil {
		return PeerNone, callError(call, err)
	}
	if can != 0 {
		return PeerDirect, nil
	}
	return PeerNone, nil
}

// EnablePeerAccess lets d's context access peer's memory
// (cuCtxEnablePeerAccess); CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (another
// Backend on the same device enabled it: they share the primary context) is
// success.
func (d *cudaDriver) EnablePeerAccess(peer Driver) error {
	const call = "cuCtxEnablePeerAccess"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	err = cudaapi.CtxEnablePeerAccess(p.ctx, 0)
	d.end()
	if err != nil && !errors.Is(err, cudaapi.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
		return callError(call, err)
	}
	return nil
}

// MemcpyPeerAsync queues cuMemcpyPeerAsync from src in peer's context to
// dst in d's, on s.
func (d *cudaDriver) MemcpyPeerAsync(dst uint64, peer Driver, src uint64, n uint64, s Stream) error {
	const call = "cuMemcpyPeerAsync"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return err
	}
	if src == 0 {
		return refused(call, "null source pointer", "pass a pointer from MemAlloc")
	}
	if err := d.deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	err = cudaapi.MemcpyPeerAsync(cudaapi.DevicePtr(dst), d.ctx, cudaapi.DevicePtr(src), p.ctx, n, cudaapi.Stream(s))
	d.end()
	if err != nil {
		return callError(call, err)
	}
	return nil
}
