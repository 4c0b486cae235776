package sim

import "github.com/vyre-go/vyrecuda/core/driver"

// LaunchBatch queues ls on s one Launch at a time (driver.BatchLauncher), so
// Backends over the simulated device take the batched path, with the same
// counters and faults as separate launches: a failing launch stops the
// batch, and its index comes back with the error. A launch with
// Programmatic set is counted (and faulted) as OpLaunchProgrammatic, then
// as OpLaunch like every launch; it runs the same way, after everything
// queued before it, as a kernel that waits on its grid dependencies
// computes on a GPU.
func (d *Device) LaunchBatch(s driver.Stream, ls []driver.Launch) (int, error) {
	for i := range ls {
		if err := d.launch(ls[i].Programmatic, ls[i].F, ls[i].Cfg, s, ls[i].Args); err != nil {
			return i, err
		}
	}
	return len(ls), nil
}
