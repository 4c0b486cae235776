package core

import (
	"fmt"
	"log/slog"

	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// A call whose device work failed drains its streams with one more
// StreamSynchronize before it gives anything back (syncOrQuarantine). When
// that drain fails too, work may still be queued on the stream: copies that
// read or write the call's pinned staging, its device staging and the
// resident buffers it targets. None of that may go back to a pool, be freed
// or be handed to another buffer while the work can still run, and the
// stream cannot be destroyed or reused. So the leases move into the launch
// pool's quarantine (package streams), with the staging blocks, device
// staging allocations, an in-flight reference on each resident buffer and
// the caller-pinned regions a direct copy uses, each as an item whose
// release puts it back where it came from.
//
// The quarantine is retried (one StreamSynchronize per held stream) at
// cheap moments that need no lock but its own: before every lease
// acquisition, when Free finds a buffer in flight (PinnedBuffer.Free
// and UnpinHostBuffer pinned memory a direct copy holds), and at Close.
// A stream that synchronizes gives everything of its entry back normally.
// Close gives up on streams that still fail (SettleQuarantine): on a real
// device a StreamSynchronize that keeps failing almost always means a sticky
// error that broke the context, so their work will never run; Close then
// destroys their streams and events (CUDA releases a stream with pending work
// once the work ends or the context goes), and deliberately leaves the
// memory their work may touch allocated, staging and resident buffers alike,
// to be reclaimed with the context, and reports ErrDriver (abandonedError).
//
// A peer copy runs on the destination Backend's stream but reads the source
// Backend's buffers. When its drain fails, each side is quarantined in its
// own Backend's pool: the destination holds the stream and its own buffers,
// the source holds an entry of its own with its buffers' references,
// waiting for the destination's. The source's Close reports a wait that
// never ended as memory left allocated, as for its own streams.

// inUse is what a failed call's queued work may still read or write: its
// staging (released by the caller's deferred release unless detached), its
// device staging allocations (put back by the caller unless zeroed) and the
// resident buffers it targets, and the caller-pinned regions a direct DMA
// reads or writes (each holding one pending use that the quarantine takes
// over when the drain fails). discard gives leases that do drain back
// unhealthy (their events saw the failure). peerEnts are resident buffers of
// peer, another Backend, that the work reads (a peer copy's sources): they
// are quarantined on peer, not on the Backend that drains.
type inUse struct {
	st       []*hostmem.Staging
	dev      []*devmem.Block
	ents     []*residentEntry
	regs     []*hostmem.Region
	discard  bool
	peer     *Backend
	peerEnts []*residentEntry
}

// syncOrQuarantine synchronizes the streams of leases after a failed call,
// so nothing their queued work uses goes back while the work may still
// run. A lease whose stream drains goes back to the pool (healthy unless
// h.discard). When any drain fails, those leases and everything in h move
// to the quarantine (inUse.hold). Every lease is given back or quarantined here:
// callers must not give them back again. It reports whether every stream
// drained.
func (b *Backend) syncOrQuarantine(op string, h inUse, leases ...*streams.Lease) bool {
	return b.launch.SyncOrQuarantine(op, h.discard, func() streams.Hold { return h.hold(b, op) }, leases...)
}

// hold moves what h names out of its owners' reach, as items of b's
// quarantine: h's stagings are detached and its device allocations zeroed,
// so the caller's deferred releases find nothing, and each of h.ents gets an
// in-flight reference of the quarantine's own (the caller still drops its
// own); each item's release puts its thing back. h.peerEnts get their
// references as items of h.peer's quarantine.
func (h inUse) hold(b *Backend, op string) streams.Hold {
	var out streams.Hold
	for _, st := range h.st {
		for _, blk := range st.Detach() {
			out.Items = append(out.Items, streams.Item{Kind: streams.PinnedStaging, Bytes: uint64(blk.Size()),
				Release: func() { b.hostPool.Return(blk) }})
		}
	}
	for _, d := range h.dev {
		if a := *d; a.Ptr() != 0 {
			*d = devmem.Block{}
			out.Items = append(out.Items, streams.Item{Kind: streams.DeviceStaging, Bytes: a.Size(),
				Release: func() { b.devPool.FreeOrKeep(a) }})
		}
	}
	out.Items = refItems(out.Items, b, op, h.ents)
	for _, reg := range h.regs {
		out.Items = append(out.Items, streams.Item{Kind: streams.PinnedRange, Bytes: uint64(reg.Len()),
			Release: func() { b.pinned.Done(reg) }})
	}
	if len(h.peerEnts) > 0 {
		peer := h.peer
		if peer == nil {
			peer = b
		}
		out.Peer, out.PeerItems = peer.launch, refItems(nil, peer, op, h.peerEnts)
	}
	return out
}

// refItems takes one in-flight reference on each of ents (buffers of b) and
// appends an item that drops it to items.
func refItems(items []streams.Item, b *Backend, op string, ents []*residentEntry) []streams.Item {
	for _, e := range ents {
		e.inflight.Add(1)
		items = append(items, streams.Item{Kind: streams.BufferRef, Bytes: uint64(e.n),
			Release: func() { b.store.unpinEntries(op, []*residentEntry{e}) }})
	}
	return items
}

// abandonedError reports, for Close (op), what SettleQuarantine gave up on:
// nil when nothing, otherwise an ErrDriver saying which memory the
// unsynchronized streams' work may still use and that it is left
// allocated (staging blocks and device staging are dropped from their
// pools' reach; resident buffers keep the quarantine's in-flight
// reference, which releaseAll respects, and caller-pinned regions of direct
// copies their pending use, which pinnedRegistry.releaseAll respects); the
// same for buffers a failed peer copy on another Backend's stream may still
// read. It logs the same.
func abandonedError(op string, a streams.Abandoned, log *slog.Logger) error {
	if a.Empty() {
		return nil
	}
	hostBytes, devBytes := a.Bytes[streams.PinnedStaging], a.Bytes[streams.DeviceStaging]
	bufs, regs, regBytes := a.Count[streams.BufferRef], a.Count[streams.PinnedRange], a.Bytes[streams.PinnedRange]
	e := driverError(op, "StreamSynchronize", a.Err)
	e.Detail = fmt.Sprintf("%d stream(s) of this Backend and %d of other Backends (peer copies reading this Backend's buffers), "+
		"of failed calls %v, could not be synchronized; their work may still use "+
		"%d bytes of pinned staging, %d bytes of device staging, %d resident buffer(s) and %d caller-pinned host range(s) (%d bytes), left allocated",
		a.Streams, a.PeerWaits, a.Ops, hostBytes, devBytes, bufs, regs, regBytes)
	e.Fix = "the device context is most likely broken by a sticky error: end the process or reset the device; " +
		"the memory left allocated is reclaimed with the context"
	log.Error("Close left memory of unsynchronized streams allocated", "op", op, "streams", a.Streams,
		"peerStreams", a.PeerWaits, "pinnedBytes", hostBytes, "deviceBytes", devBytes, "residentBuffers", bufs, "err", a.Err)
	return e
}
