package core

import (
	"fmt"
	"log/slog"

	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// A call whose device work failed drains its streams with one more
// StreamSynchronize before it gives anything back
// (transfer.Engine.SyncOrQuarantine). When that drain fails too, work may
// still be queued on the stream: copies that read or write the call's pinned
// staging, its device staging and the resident buffers it targets. None of
// that may go back to a pool, be freed or be handed to another buffer while
// the work can still run, and the stream cannot be destroyed or reused. So
// the leases move into the launch pool's quarantine (package streams), with
// the staging blocks, device staging allocations, an in-flight reference on
// each resident buffer and the caller-pinned regions a direct copy uses,
// each as an item whose release puts it back where it came from.
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
// the source holds an entry of its own with its buffers' references, waiting
// for the destination's (peer.go, syncPeerCopy). The source's Close reports
// a wait that never ended as memory left allocated, as for its own streams.

// held is what a failed call's queued work may still use
// (transfer.InUse): its pinned and device staging, the resident buffers it
// targets and the caller-pinned regions a direct DMA uses. The transfer
// engine builds the quarantine's items from it (Engine.Hold), taking the
// buffers' in-flight uses through refItems.
type held = transfer.InUse[*residentEntry]

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
