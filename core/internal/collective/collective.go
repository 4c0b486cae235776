// Package collective owns the mechanism of collective calls across the
// ranks of a communicator: the kinds (all-reduce, broadcast, all-gather,
// reduce-scatter), the checks of their arguments, of each rank's buffer
// shape and of all ranks' shapes together (before anything is pinned),
// building a communicator per device and joining one with a deadline
// (join.go), and queueing one call on every rank this process drives (each
// on a stream leased from its rank's pool, between GroupStart and GroupEnd
// when one goroutine drives several) and waiting for it with one fence per
// device, or until a context is done (run.go). A failure or a done context
// drains, or quarantines, every rank's stream and aborts the communicators
// that would otherwise wait forever. Ranks in other processes compare
// their calls through a Desc of each, which their caller exchanges
// (desc.go).
//
// It works on driver handles (driver.CollectiveDriver, driver.Communicator,
// driver.Stream), on leases of a streams.Pool per rank, and on callbacks a
// Part carries: pinning its buffers and reporting their device addresses,
// dropping them, naming what a failed call's work may still use, and
// counting a fence. It never resolves handles, enters a Backend or touches
// resident buffers itself, and must not import core: package core owns the
// Group and Comm types, their locks and their Backends.
package collective

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// Kind is which collective a call runs.
type Kind int

// The collectives.
const (
	AllReduce Kind = iota
	Broadcast
	AllGather
	ReduceScatter
)

var kindNames = [...]string{AllReduce: "AllReduce", Broadcast: "Broadcast", AllGather: "AllGather", ReduceScatter: "ReduceScatter"}

// String returns the name of the driver call that queues k, e.g. "AllReduce".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("collective %d", int(k))
	}
	return kindNames[k]
}

// Args is what every rank of one collective call agrees on.
type Args struct {
	Kind  Kind
	DT    driver.DataType
	Red   driver.ReduceOp // AllReduce and ReduceScatter only
	Root  int             // Broadcast only
	Ranks int             // the communicator's size
}

// NeedsSend reports whether rank reads its send buffer (a broadcast reads
// only the root's).
func (a *Args) NeedsSend(rank int) bool { return a.Kind != Broadcast || rank == a.Root }

// Check validates the arguments shared by all ranks: the data type, the
// reduction where the kind reduces, and the root (0 unless a broadcast
// sets it) against the number of ranks.
func (a *Args) Check(op string) error {
	switch {
	case !a.DT.Valid():
		return errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("data type %d", int(a.DT)), "pass one of the core.Data* constants")
	case a.Kind != Broadcast && a.Kind != AllGather && !a.Red.Valid():
		return errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("reduction %d", int(a.Red)), "pass one of the core.Reduce* constants")
	case a.Root < 0 || a.Root >= a.Ranks:
		return errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("root %d of %d ranks", a.Root, a.Ranks), "pass a root rank from 0 to the number of ranks minus 1")
	}
	return nil
}

// Shape checks one rank's buffer lengths in bytes (send is ignored where
// the rank reads none) and returns its element count per block: send and
// recv of an all-reduce or broadcast are equal; an all-gather's recv holds
// Ranks sends; a reduce-scatter's send holds Ranks recvs. Arguments that
// fail Check fail it the same way.
func (a *Args) Shape(op string, rank, send, recv int) (uint64, error) {
	if err := a.Check(op); err != nil {
		return 0, err
	}
	size := a.DT.Size()
	if recv%size != 0 || (a.NeedsSend(rank) && send%size != 0) {
		return 0, errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("rank %d: send %d bytes, recv %d bytes are not whole %s elements (%d bytes each)", rank, send, recv, a.DT, size),
			"size the buffers in whole elements of the data type")
	}
	want, block := recv, recv
	switch a.Kind {
	case AllGather:
		want, block = recv/a.Ranks, recv/a.Ranks
		if recv%a.Ranks != 0 {
			want = -1
		}
	case ReduceScatter:
		want = recv * a.Ranks
	}
	if a.NeedsSend(rank) && send != want {
		return 0, errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("rank %d: send has %d bytes and recv %d bytes, which does not fit %d ranks", rank, send, recv, a.Ranks),
			"make send and recv equal for AllReduce and Broadcast, recv = ranks x send for AllGather, send = ranks x recv for ReduceScatter")
	}
	return uint64(block / size), nil
}

// Part is one rank's share of a collective call, as its caller describes
// it: the rank, its communicator, the driver and pool of its device, the
// byte lengths of its buffers, and callbacks over buffers the caller owns.
type Part struct {
	Rank             int
	Communicator     driver.Communicator
	Drv              driver.Driver
	Pool             *streams.Pool
	SendLen, RecvLen int
	// Pin takes the rank's recv buffer, and its send buffer when send is
	// set, in flight for the call and returns their device addresses (send
	// is recv's when not asked for). It changes nothing when it fails.
	Pin func(op string, send bool) (recvPtr, sendPtr uint64, err error)
	// Unpin drops what Pin took.
	Unpin func(op string)
	// Hold names what the rank's failed work may still use (its pinned
	// buffers): it goes to the quarantine with the stream when the stream
	// cannot be drained. Nil holds nothing.
	Hold func(op string) streams.Hold
	// Fenced, when set, is called once the rank's stream has synchronized
	// after a successful call.
	Fenced func()

	pinned           bool
	sendPtr, recvPtr uint64
	lease            *streams.Lease
}
