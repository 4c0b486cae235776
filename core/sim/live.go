package sim

import "fmt"

// Live counts the objects a Device holds right now. After a Backend over the
// device is closed, every count should be zero.
type Live struct {
	Allocations      int    // live MemAlloc allocations
	DeviceBytes      uint64 // bytes in those allocations
	PinnedBuffers    int    // live HostAlloc buffers
	PinnedBytes      uint64 // bytes in those buffers
	RegisteredRanges int    // live HostRegister ranges
	Streams          int    // streams not destroyed
	Events           int    // events not destroyed
	Modules          int    // modules not unloaded
	QueuedOps        int    // queued operations not executed yet, on all streams
	Communicators    int    // communicator ranks on the device not destroyed
	Graphs           int    // graphs from StreamEndCapture not destroyed
	GraphExecs       int    // executable graphs not destroyed
}

// Zero reports whether nothing is live.
func (l Live) Zero() bool { return l == Live{} }

// String lists the counts, for test failure messages.
func (l Live) String() string {
	return fmt.Sprintf("allocations=%d (%d bytes) pinned=%d (%d bytes) registered=%d streams=%d events=%d modules=%d queued=%d graphs=%d graph-execs=%d communicators=%d",
		l.Allocations, l.DeviceBytes, l.PinnedBuffers, l.PinnedBytes, l.RegisteredRanges,
		l.Streams, l.Events, l.Modules, l.QueuedOps, l.Graphs, l.GraphExecs, l.Communicators)
}

// Live returns the current live-object counts.
func (d *Device) Live() Live {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.liveLocked()
}

func (d *Device) liveLocked() Live {
	return Live{
		Allocations:      len(d.allocs),
		DeviceBytes:      d.allocated,
		PinnedBuffers:    len(d.pinned),
		PinnedBytes:      d.pinnedBytes,
		RegisteredRanges: len(d.registered),
		Streams:          len(d.streams),
		Events:           len(d.events),
		Modules:          len(d.modules),
		QueuedOps:        d.queued,
		Communicators:    len(d.comms),
		Graphs:           len(d.graphs),
		GraphExecs:       len(d.execs),
	}
}

// TB is the part of testing.TB that RequireNoLeaks uses; *testing.T and
// *testing.B satisfy it. Taking it as an interface keeps package testing out
// of programs that import sim.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// RequireNoLeaks reports a test error naming every live object (graphs and
// executable graphs included) when d holds any, and returns whether it held
// none. Call it after closing everything built on d, e.g. t.Cleanup(func() { sim.RequireNoLeaks(t, dev) }).
func RequireNoLeaks(t TB, d *Device) bool {
	t.Helper()
	if l := d.Live(); !l.Zero() {
		t.Errorf("sim: objects still live on the simulated device: %s", l)
		return false
	}
	return true
}
