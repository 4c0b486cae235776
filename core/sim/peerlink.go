package sim

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/driver"
)

var _ driver.PeerAttributeReporter = (*Device)(nil)

// checkSquare reports a matrix of MachineConfig (name) that is not nil and
// not n x n.
func checkSquare[T any](name string, n int, m [][]T) error {
	if m == nil {
		return nil
	}
	if len(m) != n {
		return fmt.Errorf("sim: NewMachine: %s has %d rows for %d devices; give one row per device", name, len(m), n)
	}
	for i, row := range m {
		if len(row) != n {
			return fmt.Errorf("sim: NewMachine: %s row %d has %d entries for %d devices; give one per device", name, i, len(row), n)
		}
	}
	return nil
}

// peerLinks builds what PeerAttributes reports for every pair from the
// access matrix peer and cfg's atomics and rank matrices.
func peerLinks(cfg MachineConfig, peer [][]bool) ([][]driver.PeerAttributes, error) {
	n := cfg.Devices
	if err := checkSquare("PeerNativeAtomics", n, cfg.PeerNativeAtomics); err != nil {
		return nil, err
	}
	if err := checkSquare("PeerPerformanceRank", n, cfg.PeerPerformanceRank); err != nil {
		return nil, err
	}
	links := make([][]driver.PeerAttributes, n)
	for i := range links {
		links[i] = make([]driver.PeerAttributes, n)
		for j := range links[i] {
			l := &links[i][j]
			l.Access = peer[i][j]
			l.NativeAtomics = l.Access
			if cfg.PeerNativeAtomics != nil {
				l.NativeAtomics = cfg.PeerNativeAtomics[i][j]
			}
			if cfg.PeerPerformanceRank != nil {
				l.PerformanceRank = cfg.PeerPerformanceRank[i][j]
			}
			switch {
			case i == j:
			case l.NativeAtomics && !l.Access:
				return nil, fmt.Errorf("sim: NewMachine: PeerNativeAtomics[%d][%d] is true but Peer gives device %d no access to device %d; give atomics only where there is access", i, j, i, j)
			case l.PerformanceRank < 0:
				return nil, fmt.Errorf("sim: NewMachine: PeerPerformanceRank[%d][%d] is %d; give 0 (the fastest) or more", i, j, l.PerformanceRank)
			}
		}
	}
	return links, nil
}

// PeerAttributes reports the link from d to peer's memory as the Machine's
// configuration describes it (MachineConfig.Peer, PeerNativeAtomics,
// PeerPerformanceRank). It fails with CUDA_ERROR_INVALID_DEVICE for d itself
// and for a peer that is not a device of d's Machine, as CUDA does.
func (d *Device) PeerAttributes(peer driver.Driver) (driver.PeerAttributes, error) {
	const o = OpPeerAttributes
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(o); done {
		return driver.PeerAttributes{}, err
	}
	p, err := d.peerOf(o, peer)
	if err != nil {
		return driver.PeerAttributes{}, err
	}
	if p == d {
		return driver.PeerAttributes{}, fail(o, cudaInvalidDevice, "device %d is not its own peer", d.index)
	}
	return d.machine.links[d.index][p.index], nil
}
