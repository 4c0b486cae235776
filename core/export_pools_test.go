package core

import (
	"log/slog"
)

// Exports of the pools, staging and the launch-resource pool for the
// external tests in package core_test (which import core/sim, so they cannot
// live inside package core).

type (
	DevicePool  = devicePool
	DeviceAlloc = deviceAlloc
	LaunchPool  = launchPool
	LaunchLease = launchLease
)

const DefaultLaunchIdle = defaultLaunchIdle

func NewDevicePool(drv Driver, total, maxCachedBytes uint64, log *slog.Logger) *DevicePool {
	return newDevicePool(drv, total, maxCachedBytes, 1<<40, log)
}

func (p *devicePool) Get(op string, n int) (DeviceAlloc, error) { return p.get(op, n, true) }
func (p *devicePool) GetExact(op string, n int) (DeviceAlloc, error) {
	return p.get(op, n, false)
}
func (p *devicePool) Put(a DeviceAlloc)                   { p.put(a) }
func (p *devicePool) Free(op string, a DeviceAlloc) error { return p.free(op, a) }
func (p *devicePool) CachedBytes() uint64                 { return p.cachedBytes() }
func (p *devicePool) AllocatedBytes() uint64              { return p.allocatedBytes() }
func (p *devicePool) Close() error                        { return p.close() }
func (p *devicePool) Trim(op string) error                { return p.trim(op) }

func (a deviceAlloc) Ptr() uint64  { return a.ptr }
func (a deviceAlloc) Size() uint64 { return a.blk.Size }
func (a deviceAlloc) N() int       { return a.n }

func NewLaunchPool(drv Driver, log *slog.Logger) *LaunchPool { return newLaunchPool(drv, log) }
func NewLaunchPoolSize(drv Driver, log *slog.Logger, maxIdle int) *LaunchPool {
	return newLaunchPoolSize(drv, log, maxIdle)
}

func (p *launchPool) Lease(op string, timing bool) (*LaunchLease, error) { return p.lease(op, timing) }
func (p *launchPool) GiveBack(l *LaunchLease, healthy bool)              { p.giveBack(l, healthy) }
func (p *launchPool) Counts() LaunchResourceCounts                       { return p.counts() }
func (p *launchPool) Close() error                                       { return p.close() }

func (p *launchPool) LeaseTimingPair(op string) (*LaunchLease, error) { return p.leaseTimingPair(op) }

type DispatchAllocs = dispatchAllocs

func NewDispatchAllocs(pool *DevicePool) *DispatchAllocs {
	d := newDispatchAllocs(pool)
	return &d
}

func (d *dispatchAllocs) Take(op string, n int) (DeviceAlloc, error) { return d.take(op, n) }
func (d *dispatchAllocs) Release()                                   { d.release() }
func (d *dispatchAllocs) Held() int                                  { return d.held() }
