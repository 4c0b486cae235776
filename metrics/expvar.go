package metrics

import (
	"expvar"
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/core"
)

// Snapshot is what Publish shows for a Backend: its device and the two
// snapshots, read again each time the variable is read.
type Snapshot struct {
	Device    core.DeviceInfo
	Memory    core.MemoryStats
	Telemetry core.Telemetry
}

// Take returns b's Snapshot now; a nil b gives the zero Snapshot.
func Take(b *core.Backend) Snapshot {
	if b == nil {
		return Snapshot{}
	}
	return Snapshot{Device: b.DeviceInfo(), Memory: b.MemoryStats(), Telemetry: b.Telemetry()}
}

// publishMu makes Publish's check for a taken name and expvar.Publish one
// step, so two Publish calls of one name cannot both pass the check
// (expvar.Publish panics on a name already taken).
var publishMu sync.Mutex

// Publish makes b's Snapshot an expvar variable called name, served as
// JSON by expvar's handler (/debug/vars) with the field names of
// core.DeviceInfo, core.MemoryStats and core.Telemetry. Variables cannot
// be removed: publish each Backend once, for the life of the process. An
// empty name, a nil Backend and a name already published are
// ErrInvalidArgument, publishing nothing.
func Publish(name string, b *core.Backend) error {
	const op = "metrics.Publish"
	bad := func(detail, fix string) error {
		return &core.Error{Op: op, Kind: core.KindInvalidArgument, Detail: detail, Fix: fix}
	}
	switch {
	case name == "":
		return bad("the name is empty", "pass the name the variable should have in /debug/vars")
	case b == nil:
		return bad(fmt.Sprintf("the Backend for %q is nil", name), "pass a Backend from core.Open or core.OpenDefault")
	}
	publishMu.Lock()
	defer publishMu.Unlock()
	if expvar.Get(name) != nil {
		return bad(fmt.Sprintf("an expvar variable called %q already exists", name),
			"publish each Backend once, under a name of its own")
	}
	expvar.Publish(name, expvar.Func(func() any { return Take(b) }))
	return nil
}
