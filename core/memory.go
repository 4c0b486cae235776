package core

import (
	"log/slog"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// The Backend's memory is two pools of their own packages: device memory
// (core/internal/devmem, over internal/alloc) and pinned host staging
// (core/internal/hostmem). This file builds the pinned pool over the copy
// helpers (transfer.EvictHelpers) and holds the public verbs that reach
// both.

// Trim gives every cached device block and every cached pinned staging
// block back to the driver now. Memory in use is never touched: live
// resident buffers, and staging or scratch that unfinished or quarantined
// work still holds (that is not in the caches). Afterwards MemoryStats'
// CachedDevice and CachedPinned are 0 and the device holds exactly MemoryStats().Reserved bytes for
// this Backend. A driver failure to free a block leaves that block cached
// (or, for pinned staging without room in its cache, kept and still
// counted in ReservedPinned) and is returned after every other block was
// freed; the next Trim retries it, as it retries pinned staging whose free
// failed after a transfer. Trim on a closed Backend is ErrClosed.
func (b *Backend) Trim() error {
	const op = "Trim"
	if b == nil {
		return newError(op, KindInvalidArgument, "the Backend is nil", "call Trim on a Backend from core.Open")
	}
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	derr := b.devPool.Trim(op)
	herr := b.hostPool.Trim(op)
	if derr != nil {
		return derr
	}
	if herr != nil {
		return herr
	}
	return nil
}

// newHostPool returns the pinned host pool of a Backend opened with cfg;
// its evictions run on the copy helpers (transfer.EvictHelpers).
func newHostPool(drv Driver, cfg *config) *hostmem.Pool {
	return hostmem.New(drv, hostmem.Config{Cap: cfg.pinnedPoolCap, Log: cfg.log, Helpers: transfer.EvictHelpers{},
		SpareWindow: cfg.pinTest.SpareWindow, SpareRetry: cfg.pinTest.SpareRetry, EvictHook: cfg.pinTest.EvictHook})
}

// subOrRepair subtracts n from c; when that would underflow the accounting is
// already wrong, so c is repaired to zero and the event logged as an error,
// where the reference repairs instead of failing the caller.
func subOrRepair(c *accounting.Counter, n uint64, log *slog.Logger, what string) {
	if c.SubOrRepair(n) {
		log.Error(what+" underflowed; repaired accounting to zero", "subtracted", n)
	}
}
