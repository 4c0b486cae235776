package core

import (
	"log/slog"
	"time"
)

// Exports of the pools and staging for the external tests in package core_test (which import core/sim, so they cannot
// live inside package core).

type (
	DevicePool  = devicePool
	DeviceAlloc = deviceAlloc
	HostPool    = hostPool
	PinnedBlock = pinnedBlock
	Staging     = staging
)

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

func NewHostPool(drv Driver, maxCachedBytes uint64, log *slog.Logger) *HostPool {
	return newHostPool(drv, maxCachedBytes, log)
}

func (p *hostPool) Get(op string, n int) (PinnedBlock, error) { return p.get(op, n) }
func (p *hostPool) Put(b PinnedBlock)                         { p.put(b) }

// EvictLater hands blocks to an eviction job that evicts all of each block
// (tests block it through SetEvictHookForTest).
func (p *hostPool) EvictLater(blocks ...PinnedBlock) {
	regions := make([][]byte, len(blocks))
	for i, b := range blocks {
		regions[i] = b.buf
	}
	p.evictLater(blocks, regions, 2, -1)
}

// SetSpareWindowForTest sets how close staged readbacks must follow each
// other for a second set of staging, and returns a function that restores
// it. Not safe while transfers run.
func SetSpareWindowForTest(d time.Duration) (restore func()) {
	old := spareWindow
	spareWindow = d
	return func() { spareWindow = old }
}

// SetSpareRetryForTest sets how long a failed spare allocation holds off
// the next one of its bucket, and returns a function that restores it. Not
// safe while transfers run.
func SetSpareRetryForTest(d time.Duration) (restore func()) {
	old := spareRetryAfter
	spareRetryAfter = d
	return func() { spareRetryAfter = old }
}

// SettleEvictions waits for every eviction job of the pool.
func (p *hostPool) SettleEvictions()        { p.settleEvictions() }
func (p *hostPool) CachedBytes() uint64     { return p.cachedBytes() }
func (p *hostPool) AllocatedBytes() uint64  { return p.allocatedBytes() }
func (p *hostPool) Close() error            { return p.close() }
func (p *hostPool) Cached(bucket int) int   { return p.cache.count(bucket) }
func (p *hostPool) SetCachedBytes(v uint64) { p.cache.cached.Store(v) }

func (b pinnedBlock) Buf() []byte { return b.buf }

// MakePinnedBlock builds a block record, for puts of foreign or malformed blocks.
func MakePinnedBlock(buf []byte) PinnedBlock { return pinnedBlock{buf: buf} }

func NewStaging(pool *HostPool) *Staging {
	s := newStaging(pool)
	return &s
}

func (s *staging) Take(op string, n int) ([]byte, error) { return s.take(op, n) }
func (s *staging) Release()                              { s.release() }
func (s *staging) Held() int                             { return s.held() }

func (s *staging) TakeUpload(op string, data []byte, n int) ([]byte, error) {
	return s.takeUpload(op, data, n)
}

type DispatchAllocs = dispatchAllocs

func NewDispatchAllocs(pool *DevicePool) *DispatchAllocs {
	d := newDispatchAllocs(pool)
	return &d
}

func (d *dispatchAllocs) Take(op string, n int) (DeviceAlloc, error) { return d.take(op, n) }
func (d *dispatchAllocs) Release()                                   { d.release() }
func (d *dispatchAllocs) Held() int                                  { return d.held() }
