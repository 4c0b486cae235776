package sim

import (
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// MachineConfig describes a simulated machine with several devices.
type MachineConfig struct {
	// Devices is the number of devices (at least 1).
	Devices int
	// Device configures every device; each one's Ordinal is its index.
	Device Config
	// Peer[i][j] says whether device i can access device j's memory
	// directly (CUDA's cuDeviceCanAccessPeer). Nil means every pair can; a
	// non-nil matrix must be Devices x Devices. The diagonal is ignored.
	Peer [][]bool
	// PeerNativeAtomics[i][j] says whether device i's atomic operations on
	// device j's memory run natively over the link (what PeerAttributes
	// reports). Nil means every pair with access has them; a non-nil matrix
	// must be Devices x Devices and true only where Peer gives access.
	PeerNativeAtomics [][]bool
	// PeerPerformanceRank[i][j] is the performance rank PeerAttributes
	// reports for the link from device i to device j (0 the fastest). Nil
	// means 0 for every pair; a non-nil matrix must be Devices x Devices,
	// with no negative rank.
	PeerPerformanceRank [][]int
}

// Machine is several simulated devices in one process, as on a host with
// several GPUs: each Device is a driver.Driver and a driver.PeerDriver and
// driver.CollectiveDriver over the others. Peer copies, waits on a peer's
// events and collectives are computed in Go. All devices of a Machine share
// one mutex, so work that crosses devices runs under one lock.
type Machine struct {
	mu    *sync.Mutex // the devices' shared mutex; guards the fields below
	cond  *sync.Cond  // on mu: a collective part was queued
	devs  []*Device
	peer  [][]bool
	links [][]driver.PeerAttributes // what PeerAttributes reports, by pair
	group int                       // depth of GroupStart calls not yet ended
	// polling is set while a query (StreamQuery, EventQuery) executes
	// work: a collective part that would wait for another rank's part stays
	// queued instead, so a query never blocks.
	polling bool
}

// NewMachine returns a machine with cfg.Devices simulated devices. It fails
// when Devices is below 1 or a peer matrix is not Devices x Devices or
// contradicts Peer.
func NewMachine(cfg MachineConfig) (*Machine, error) {
	if cfg.Devices < 1 {
		return nil, fmt.Errorf("sim: NewMachine: %d devices; ask for at least 1", cfg.Devices)
	}
	peer := make([][]bool, cfg.Devices)
	for i := range peer {
		peer[i] = make([]bool, cfg.Devices)
		for j := range peer[i] {
			peer[i][j] = true
		}
	}
	if err := checkSquare("Peer", cfg.Devices, cfg.Peer); err != nil {
		return nil, err
	}
	for i, row := range cfg.Peer {
		copy(peer[i], row)
	}
	links, err := peerLinks(cfg, peer)
	if err != nil {
		return nil, err
	}
	m := &Machine{mu: new(sync.Mutex), peer: peer, links: links}
	m.cond = sync.NewCond(m.mu)
	for i := 0; i < cfg.Devices; i++ {
		dc := cfg.Device
		dc.Ordinal = i
		d := New(dc)
		d.mu, d.machine, d.index = m.mu, m, i
		if cfg.Device.Capabilities == nil {
			// Peer access is offered where the matrix lets i reach another device.
			any := false
			for j, ok := range peer[i] {
				any = any || (ok && j != i)
			}
			d.caps.PeerAccess = d.caps.PeerAccess && any
		}
		m.devs = append(m.devs, d)
	}
	return m, nil
}

// Len returns the number of devices.
func (m *Machine) Len() int { return len(m.devs) }

// Device returns device i, or nil when i is out of range.
func (m *Machine) Device(i int) *Device {
	if m == nil || i < 0 || i >= len(m.devs) {
		return nil
	}
	return m.devs[i]
}

// Drivers returns the devices as core.Drivers, in order, for core.OpenGroup.
func (m *Machine) Drivers() []driver.Driver {
	out := make([]driver.Driver, len(m.devs))
	for i, d := range m.devs {
		out[i] = d
	}
	return out
}

// RequireMachineNoLeaks reports a test error for every device of m that
// holds live objects (see RequireNoLeaks) and returns whether none did.
func RequireMachineNoLeaks(t TB, m *Machine) bool {
	t.Helper()
	ok := true
	for _, d := range m.devs {
		if !RequireNoLeaks(t, d) {
			ok = false
		}
	}
	return ok
}

// peerOf resolves a peer driver to a Device of d's Machine.
func (d *Device) peerOf(o Op, peer driver.Driver) (*Device, error) {
	p, ok := peer.(*Device)
	if !ok || p == nil {
		return nil, fail(o, cudaInvalidDevice, "peer %T is not a simulated device", peer)
	}
	if p.machine != d.machine {
		return nil, fail(o, cudaInvalidDevice, "peer device %d is not on this device's Machine", p.cfg.Ordinal)
	}
	return p, nil
}
