package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// liveDrivers lists the open real drivers of the process, so one may
// accept page-locked memory another allocated or registered: all of it is
// portable (CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE), usable
// from every context.
var liveDrivers struct {
	mu   sync.RWMutex
	list []*Driver
}

func trackDriver(d *Driver) {
	liveDrivers.mu.Lock()
	liveDrivers.list = append(liveDrivers.list, d)
	liveDrivers.mu.Unlock()
}

func untrackDriver(d *Driver) {
	liveDrivers.mu.Lock()
	defer liveDrivers.mu.Unlock()
	for i, o := range liveDrivers.list {
		if o == d {
			liveDrivers.list = append(liveDrivers.list[:i], liveDrivers.list[i+1:]...)
			return
		}
	}
}

// lockPeerPinned looks for [p, p+n) in the page-locked ranges of the other
// open drivers. When one holds it, that driver's hostMu stays read-locked
// (so the range cannot be freed under the copy) until the returned unlock
// runs; found is false otherwise. d.hostMu must not be held by the caller
// exclusively.
func (d *Driver) lockPeerPinned(b []byte) (unlock func(), found bool) {
	p, n := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))
	liveDrivers.mu.RLock()
	defer liveDrivers.mu.RUnlock()
	for _, o := range liveDrivers.list {
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
func (d *Driver) lockPinned(call, what string, b []byte) (unlock func(), err error) {
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

// peerOf resolves a peer driver.Driver to an open real driver.
func (d *Driver) peerOf(call string, peer driver.Driver) (*Driver, error) {
	p, ok := peer.(*Driver)
	if !ok || p == nil {
		return nil, refused(call, fmt.Sprintf("peer %T is not a CUDA driver", peer),
			"pass a driver from NewCUDADriver (or a Backend from OpenCUDA)")
	}
	return p, nil
}

// PeerLink reports PeerSame when peer holds the same context (the same
// device: both retain its primary context), else what
// cuDeviceCanAccessPeer says.
func (d *Driver) PeerLink(peer driver.Driver) (driver.PeerLink, error) {
	const call = "cuDeviceCanAccessPeer"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return driver.PeerNone, err
	}
	if d == nil {
		return driver.PeerNone, nilDriver()
	}
	if p.ctx == d.ctx {
		return driver.PeerSame, nil
	}
	var can int32
	err = d.do(call, func() error {
		var err error
		can, err = cudaapi.DeviceCanAccessPeer(d.dev, p.dev)
		return err
	})
	if err != nil || can == 0 {
		return driver.PeerNone, err
	}
	return driver.PeerDirect, nil
}

// EnablePeerAccess lets d's context access peer's memory
// (cuCtxEnablePeerAccess); CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (another
// Backend on the same device enabled it: they share the primary context) is
// success.
func (d *Driver) EnablePeerAccess(peer driver.Driver) error {
	const call = "cuCtxEnablePeerAccess"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return err
	}
	return d.do(call, func() error {
		if err := cudaapi.CtxEnablePeerAccess(p.ctx, 0); !errors.Is(err, cudaapi.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
			return err
		}
		return nil
	})
}

// MemcpyPeerAsync queues cuMemcpyPeerAsync from src in peer's context to
// dst in d's, on s.
func (d *Driver) MemcpyPeerAsync(dst uint64, peer driver.Driver, src uint64, n uint64, s driver.Stream) error {
	const call = "cuMemcpyPeerAsync"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return err
	}
	if src == 0 {
		return refused(call, "null source pointer", "pass a pointer from MemAlloc")
	}
	if err := deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	return d.do(call, func() error {
		return cudaapi.MemcpyPeerAsync(cudaapi.DevicePtr(dst), d.ctx, cudaapi.DevicePtr(src), p.ctx, n, cudaapi.Stream(s))
	})
}

// The attributes cuDeviceGetP2PAttribute reports (CUdevice_P2PAttribute):
// numbers of the driver's ABI since CUDA 8.0.
const (
	p2pPerformanceRank int32 = 1
	p2pAccessSupported int32 = 2
	p2pNativeAtomics   int32 = 3
)

// PeerAttributes reports the link from d's device to peer's as
// cuDeviceGetP2PAttribute describes it: access, native atomics and the
// performance rank. The same device is refused, as the driver would.
func (d *Driver) PeerAttributes(peer driver.Driver) (driver.PeerAttributes, error) {
	const call = "cuDeviceGetP2PAttribute"
	p, err := d.peerOf(call, peer)
	if err != nil {
		return driver.PeerAttributes{}, err
	}
	if d == nil {
		return driver.PeerAttributes{}, nilDriver()
	}
	if p.dev == d.dev {
		return driver.PeerAttributes{}, refused(call, fmt.Sprintf("device %d is not its own peer", d.dev),
			"ask about the link between two different devices")
	}
	var v [3]int32
	attrs := [3]int32{p2pAccessSupported, p2pNativeAtomics, p2pPerformanceRank}
	err = d.do(call, func() error {
		for i, a := range attrs {
			x, err := cudaapi.DeviceGetP2PAttribute(a, d.dev, p.dev)
			if err != nil {
				return err
			}
			v[i] = x
		}
		return nil
	})
	if err != nil {
		return driver.PeerAttributes{}, err
	}
	return driver.PeerAttributes{Access: v[0] != 0, NativeAtomics: v[1] != 0, PerformanceRank: int(v[2])}, nil
}
