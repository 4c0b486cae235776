package core

import (
	"log/slog"
)

// Exports of the launch-resource pool for the external tests in package
// core_test (which import core/sim, so they cannot live inside package
// core).

type (
	LaunchPool  = launchPool
	LaunchLease = launchLease
)

const DefaultLaunchIdle = defaultLaunchIdle

func NewLaunchPool(drv Driver, log *slog.Logger) *LaunchPool { return newLaunchPool(drv, log) }
func NewLaunchPoolSize(drv Driver, log *slog.Logger, maxIdle int) *LaunchPool {
	return newLaunchPoolSize(drv, log, maxIdle)
}

func (p *launchPool) Lease(op string, timing bool) (*LaunchLease, error) { return p.lease(op, timing) }
func (p *launchPool) GiveBack(l *LaunchLease, healthy bool)              { p.giveBack(l, healthy) }
func (p *launchPool) Counts() LaunchResourceCounts                       { return p.counts() }
func (p *launchPool) Close() error                                       { return p.close() }

func (p *launchPool) LeaseTimingPair(op string) (*LaunchLease, error) { return p.leaseTimingPair(op) }
