package core

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// rankBufs is one rank's buffers of a collective call on b, handed to
// package collective as callbacks: it pins them, unpins them, names them
// for the quarantine and counts the fence.
type rankBufs struct {
	b          *Backend
	rank       int // its rank in the communicator
	send, recv Buffer
	ents       []*residentEntry // the pinned recv (and send) entries
}

// part describes r to package collective, over communicator c.
func (r *rankBufs) part(c Communicator) *collective.Part {
	return &collective.Part{Rank: r.rank, Communicator: c, Drv: r.b.drv, Pool: r.b.launch, SendLen: r.send.Len, RecvLen: r.recv.Len,
		Pin: r.pin, Unpin: r.unpin, Hold: r.hold, Fenced: func() {
			r.b.tel.SyncPoints.Add(1)
			r.b.tel.Collectives.Add(1)
		}}
}

func (r *rankBufs) pin(op string, send bool) (recvPtr, sendPtr uint64, err error) {
	bufs := []Buffer{r.recv}
	if send {
		bufs = append(bufs, r.send)
	}
	label := func(i int) string { return fmt.Sprintf("rank %d %s: ", r.rank, [2]string{"recv", "send"}[i]) }
	ents, err := r.b.store.pinEntries(op, bufs, label)
	if err != nil {
		return 0, 0, err
	}
	if ents[0].static.Load() {
		// A static upload set's buffers are immutable.
		r.b.store.unpinEntries(op, ents)
		e := staticWrite(op, r.recv)
		e.Detail = label(0) + e.Detail
		return 0, 0, e
	}
	r.ents = ents
	recvPtr, sendPtr = ents[0].ptr, ents[0].ptr
	if len(ents) > 1 {
		sendPtr = ents[1].ptr
	}
	return recvPtr, sendPtr, nil
}

func (r *rankBufs) unpin(op string) {
	r.b.store.unpinEntries(op, r.ents)
	r.ents = nil
}

func (r *rankBufs) hold(op string) streams.Hold { return r.b.xfer.Hold(op, held{Bufs: r.ents}) }

// enterAll enters every distinct Backend in address order (see enterPair).
func enterAll(op string, bs []*Backend) (func(), error) {
	order := append([]*Backend(nil), bs...)
	sort.Slice(order, func(i, j int) bool {
		return uintptr(unsafe.Pointer(order[i])) < uintptr(unsafe.Pointer(order[j]))
	})
	var entered []*Backend
	exit := func() {
		for i := len(entered) - 1; i >= 0; i-- {
			entered[i].exit()
		}
	}
	for i, b := range order {
		if i > 0 && b == order[i-1] {
			continue
		}
		if err := b.enter(op); err != nil {
			exit()
			return nil, err
		}
		entered = append(entered, b)
	}
	return exit, nil
}
