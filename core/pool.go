package core

import (
	"log/slog"

	"github.com/vyre-go/vyrecuda/accounting"
)

// orDiscard returns log, or a logger that drops everything when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// subOrRepair subtracts n from c; when that would underflow the accounting is
// already wrong, so c is repaired to zero and the event logged as an error,
// where the reference repairs instead of failing the caller.
func subOrRepair(c *accounting.Counter, n uint64, log *slog.Logger, what string) {
	if c.SubOrRepair(n) {
		log.Error(what+" underflowed; repaired accounting to zero", "subtracted", n)
	}
}

// dispatchAllocs holds the device allocations one dispatch uses (its
// scratch buffers and parameter block) and gives all of them back to the
// pool in release, on success and failure alike:
//
//	da := newDispatchAllocs(b.devPool)
//	defer da.release()
//
// Like staging, it belongs to one goroutine (or to the pending dispatch that
// owns it) and must not be copied after its first take.
type dispatchAllocs struct {
	pool   *devicePool
	allocs []deviceAlloc
}

// newDispatchAllocs returns an empty set that draws from pool.
func newDispatchAllocs(pool *devicePool) dispatchAllocs {
	return dispatchAllocs{pool: pool}
}

// take gets an allocation of at least n bytes (n > 0) that d owns until
// release. On failure d is unchanged and still releases what it took before.
func (d *dispatchAllocs) take(op string, n int) (deviceAlloc, error) {
	a, err := d.pool.get(op, n, true)
	if err != nil {
		return deviceAlloc{}, err
	}
	d.allocs = append(d.allocs, a)
	return a, nil
}

// held returns the number of allocations d holds.
func (d *dispatchAllocs) held() int { return len(d.allocs) }

// release gives every allocation back to the pool. It is idempotent.
func (d *dispatchAllocs) release() {
	for i := range d.allocs {
		d.pool.put(d.allocs[i])
		d.allocs[i] = deviceAlloc{}
	}
	d.allocs = d.allocs[:0]
}
