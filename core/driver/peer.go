package driver

// PeerLink says how one device reaches the memory of another.
type PeerLink int

// The ways one device reaches another's memory.
const (
	// PeerNone: no direct access; copies are staged through pinned host memory.
	PeerNone PeerLink = iota
	// PeerDirect: peer access can be enabled; copies go device to device.
	PeerDirect
	// PeerSame: the same device and context; addresses are valid on both.
	PeerSame
)

// String names the link: "none", "direct" or "same device".
func (l PeerLink) String() string {
	switch l {
	case PeerNone:
		return "none"
	case PeerDirect:
		return "direct"
	case PeerSame:
		return "same device"
	}
	return "unknown link"
}

// PeerDriver is an optional Driver capability, found by type assertion: the
// driver works together with other drivers of the same kind in one process
// (the real driver with every other real driver; a simulated device with the
// devices of its sim.Machine). Backends over such drivers copy between each
// other's resident buffers (CopyPeer).
//
// A PeerDriver also accepts, in StreamWaitEvent, events of every peer it
// reports a link to, and, in asynchronous copies, page-locked host memory
// that such a peer allocated or registered (CUDA's portable pinned memory).
type PeerDriver interface {
	// PeerLink reports how this driver's device reaches peer's memory. It
	// fails when peer is not a driver this one can work with.
	PeerLink(peer Driver) (PeerLink, error)
	// EnablePeerAccess lets work queued through this driver read and write
	// peer's device memory. Enabling it again is not an error.
	EnablePeerAccess(peer Driver) error
	// MemcpyPeerAsync queues on s, a stream of this driver, a copy of n
	// bytes from src in peer's device memory to dst in this driver's.
	MemcpyPeerAsync(dst uint64, peer Driver, src uint64, n uint64, s Stream) error
}

// PeerAttributes describe the link from one device to another's memory, as
// the driver reports it (CUDA's cuDeviceGetP2PAttribute). The CUDA driver
// does not say whether the link is NVLink or PCIe.
type PeerAttributes struct {
	// Access: the device can access the peer's memory directly (peer
	// access can be enabled).
	Access bool
	// NativeAtomics: atomic operations on the peer's memory run natively
	// over the link.
	NativeAtomics bool
	// PerformanceRank compares the link with the machine's other links: 0
	// is the fastest kind of link, higher ranks are slower.
	PerformanceRank int
}

// PeerAttributeReporter is an optional Driver capability, found by type
// assertion: the attributes of the link from this driver's device to a
// peer's.
type PeerAttributeReporter interface {
	// PeerAttributes reports the link from this driver's device to peer's
	// memory. It fails when peer is the same device, or a driver this one
	// cannot work with (see PeerDriver).
	PeerAttributes(peer Driver) (PeerAttributes, error)
}
