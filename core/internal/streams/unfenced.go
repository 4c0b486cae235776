package streams

import (
	"slices"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// Unfenced work.
//
// A call whose work needs no host wait (a small upload the driver has
// already read out of the caller's memory) gives its lease back with
// ReturnUnfenced instead of synchronizing it: the lease, its completion
// event recorded after the work, stays with the Pool. Every later Lease
// orders its stream after that work: it takes the newest unfenced lease's
// stream itself (its work is then queued behind that one's), and of the
// older ones, one whose event has completed goes back to the idle lists
// and one still running gets a StreamWaitEvent on the lease's stream. Work of this Pool's device queued on
// any leased stream therefore runs after every unfenced call that returned
// before the lease was taken. The host waits for all of it with Settle:
// readers that queue on another device's streams (peer copies) and device
// memory going back to the driver do; Close does first.

// maxUnfenced bounds the unfenced leases a Pool keeps: past it,
// ReturnUnfenced settles the oldest first.
const maxUnfenced = 8

// ReturnUnfenced gives l back with its work still queued: l.Done must have
// been recorded on l.Stream after that work. Later leases are ordered
// after it (see Unfenced work above). A nil lease, one from another pool or
// one already returned is ignored as Return ignores it. It returns the
// failure of settling the oldest unfenced lease, when it had to.
func (p *Pool) ReturnUnfenced(op string, l *Lease) error {
	if l == nil || l.pool != p {
		p.Return(l, true)
		return nil
	}
	p.mu.Lock()
	if l.returned {
		p.mu.Unlock()
		return nil
	}
	l.returned = true
	p.leases--
	var oldest *Lease
	if len(p.unfenced) >= maxUnfenced {
		oldest = p.unfenced[0]
	}
	p.unfenced = append(p.unfenced, l)
	p.mu.Unlock()
	if oldest != nil {
		return p.settleOne(op, oldest)
	}
	return nil
}

// takeUnfenced hands the newest unfenced lease's stream and event to l:
// work queued on it runs after that lease's work without a wait, and
// order then deals with the older ones. It reports whether there was one.
func (p *Pool) takeUnfenced(l *Lease) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.unfenced)
	if n == 0 {
		return false
	}
	u := p.unfenced[n-1]
	p.unfenced[n-1] = nil
	p.unfenced = p.unfenced[:n-1]
	l.Stream, l.Done = u.Stream, u.Done
	return true
}

// Order makes the stream of l, a lease held across calls, wait for the
// unfenced work returned since it was leased (as Lease does for a new one).
func (p *Pool) Order(op string, l *Lease) error { return p.order(op, l) }

// order makes l's stream wait for every unfenced lease still running and
// recycles the ones that have completed. A failed query or wait is
// returned, and the unfenced leases from the failing one on are kept for
// Settle.
func (p *Pool) order(op string, l *Lease) error {
	p.mu.Lock()
	if len(p.unfenced) == 0 {
		p.mu.Unlock()
		return nil
	}
	keep := p.unfenced[:0]
	var destroy []handle
	var first error
	for i, u := range p.unfenced {
		done, err := p.drv.EventQuery(u.Done)
		switch {
		case err != nil:
			first = errs.Driver(op, "EventQuery", err)
		case done:
			destroy = append(destroy, p.idleLocked(u, true)...)
			continue
		default:
			if err = p.drv.StreamWaitEvent(l.Stream, u.Done); err == nil {
				keep = append(keep, u)
				continue
			}
			first = errs.Driver(op, "StreamWaitEvent", err)
		}
		keep = append(keep, p.unfenced[i:]...)
		break
	}
	clear(p.unfenced[len(keep):])
	p.unfenced = keep
	p.mu.Unlock()
	for _, it := range destroy {
		_ = p.destroy(it.k, it.h)
	}
	return first
}

// Settle waits on the host for the work of every unfenced lease and
// recycles them. A lease whose stream fails to synchronize is destroyed;
// the first failure is returned.
func (p *Pool) Settle(op string) error {
	p.mu.Lock()
	us := append([]*Lease(nil), p.unfenced...)
	p.mu.Unlock()
	var first error
	for _, u := range us {
		if err := p.settleOne(op, u); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Unfenced reports how many unfenced leases the Pool holds.
func (p *Pool) Unfenced() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.unfenced)
}

// settleOne synchronizes u's stream, then recycles u (destroys it when the
// synchronization failed) unless a lease took it meanwhile. u stays among
// the unfenced leases while the host waits, so leases taken meanwhile are
// still ordered after it.
func (p *Pool) settleOne(op string, u *Lease) error {
	err := p.drv.StreamSynchronize(u.Stream)
	p.mu.Lock()
	var destroy []handle
	for i, v := range p.unfenced {
		if v == u {
			p.unfenced = slices.Delete(p.unfenced, i, i+1)
			destroy = p.idleLocked(u, err == nil)
			break
		}
	}
	p.mu.Unlock()
	for _, it := range destroy {
		_ = p.destroy(it.k, it.h)
	}
	if err != nil {
		return errs.Driver(op, "StreamSynchronize", err)
	}
	return nil
}
