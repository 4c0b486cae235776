package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/fusion"
)

// PeerCopy is one copy of CopyPeer: Len bytes of Src (a buffer of the
// source Backend) starting at SrcOffset, written into Dst (a buffer of the
// destination Backend) starting at DstOffset.
type PeerCopy struct {
	Dst       Buffer
	DstOffset int
	Src       Buffer
	SrcOffset int
	Len       int
}

// peerCache remembers, per source Backend, how a Backend reaches it; a
// PeerDirect entry means peer access is enabled.
type peerCache struct {
	mu    sync.Mutex // guards links; held across the driver's link query and enable
	links map[*Backend]PeerLink
}

// CopyPeer copies bytes between resident buffers of two Backends, in order,
// with one fence, and returns when they have arrived. dst and src may be the
// same Backend, or two Backends of one device, whose copies run device to
// device in one context; Backends of two devices copy directly where the
// devices can access each other (peer access is enabled on first use and
// remembered), and through pinned host memory from dst's staging pool where
// they cannot. Consecutive copies that continue each other on both sides
// are fused.
//
// Every copy is validated before anything is queued: handles must be live
// buffers of their Backend (a buffer of src named as a destination is
// refused with ErrUnknownHandle), ranges must fit, and within one buffer
// the source and destination ranges of a copy must not overlap; a failure
// changes nothing. While the copy runs, the buffers are in flight on both
// Backends (Free refuses them and Close waits). The Backends'
// drivers must work together: the real driver (OpenCUDA, OpenDevices), or
// devices of one sim.Machine; others fail with ErrUnsupported.
func CopyPeer(dst, src *Backend, copies []PeerCopy) error {
	return copyPeer(context.Background(), "CopyPeer", dst, src, copies)
}

// CopyPeerContext is CopyPeer that stops waiting when ctx is done, with an
// ErrInFlight that wraps ctx.Err(). A context already done copies nothing.
// A copy already queued cannot be called back: it runs to completion, its
// buffers stay in flight on both Backends (Free refuses them with
// ErrInFlight) until a background goroutine has waited for it and released
// them with its stream and staging, and Close of either Backend waits for
// that. A nil ctx is ErrInvalidArgument.
func CopyPeerContext(ctx context.Context, dst, src *Backend, copies []PeerCopy) error {
	return copyPeer(ctx, "CopyPeerContext", dst, src, copies)
}

func copyPeer(ctx context.Context, op string, dst, src *Backend, copies []PeerCopy) error {
	if dst == nil || src == nil {
		return newError(op, KindInvalidArgument, fmt.Sprintf("destination Backend nil: %t, source Backend nil: %t", dst == nil, src == nil),
			"pass two open Backends")
	}
	if ctx == nil {
		return nilContext(op)
	}
	exit, err := enterPair(op, dst, src)
	if err != nil {
		return err
	}
	defer exit()
	plan, err := planPeer(op, dst, src, copies)
	if err != nil {
		return err
	}
	defer func() {
		if !plan.handedOff {
			plan.unpin()
		}
	}()
	if plan.bytes == 0 {
		return nil
	}
	if cause := ctx.Err(); cause != nil {
		return peerCancelled(op, cause, false)
	}
	if src != dst {
		// dst's streams are not ordered after src's unfenced uploads.
		if err := src.launch.Settle(op); err != nil {
			return err
		}
	}
	link, err := dst.peers.link(op, dst, src)
	if err != nil {
		return err
	}
	switch link {
	case PeerSame:
		err = plan.copyOnDevice(ctx, op, false)
	case PeerDirect:
		err = plan.copyOnDevice(ctx, op, true)
	default:
		err = copyStaged(ctx, op, dst, src, plan)
	}
	if err == nil {
		dst.tel.Requested.Add(uint64(len(copies)))
		dst.tel.DeviceCopies.Add(uint64(len(plan.fused)))
	}
	return err
}

// enterPair enters both Backends, in address order so two calls naming the
// same pair the other way round cannot deadlock against a waiting Close.
func enterPair(op string, a, b *Backend) (func(), error) {
	if a == b {
		if err := a.enter(op); err != nil {
			return nil, err
		}
		return a.exit, nil
	}
	first, second := a, b
	if uintptr(unsafe.Pointer(b)) < uintptr(unsafe.Pointer(a)) {
		first, second = b, a
	}
	if err := first.enter(op); err != nil {
		return nil, err
	}
	if err := second.enter(op); err != nil {
		first.exit()
		return nil, err
	}
	return func() { second.exit(); first.exit() }, nil
}

// peerPlan is a validated CopyPeer: both sides' buffers in flight and the
// fused device copies.
type peerPlan struct {
	dst, src         *Backend
	dstEnts, srcEnts []*residentEntry
	fused            []fusion.PeerCopy
	bytes            uint64
	handedOff        bool // a background goroutine finishes the copy and unpins (later)
}

func (p *peerPlan) unpin() {
	p.dst.store.unpinEntries("CopyPeer", p.dstEnts)
	p.src.store.unpinEntries("CopyPeer", p.srcEnts)
}

// planPeer validates copies, pins their buffers and fuses them.
func planPeer(op string, dst, src *Backend, copies []PeerCopy) (*peerPlan, error) {
	dbufs := make([]Buffer, len(copies))
	sbufs := make([]Buffer, len(copies))
	for i, c := range copies {
		dbufs[i], sbufs[i] = c.Dst, c.Src
	}
	dents, err := dst.store.pinEntries(op, dbufs, func(i int) string { return fmt.Sprintf("copy %d destination: ", i) })
	if err != nil {
		return nil, err
	}
	sents, err := src.store.pinEntries(op, sbufs, func(i int) string { return fmt.Sprintf("copy %d source: ", i) })
	if err != nil {
		dst.store.unpinEntries(op, dents)
		return nil, err
	}
	p := &peerPlan{dst: dst, src: src, dstEnts: dents, srcEnts: sents}
	for i, e := range dents {
		if e.static.Load() {
			// A static upload set's buffers are immutable.
			p.unpin()
			err := staticWrite(op, copies[i].Dst)
			err.Detail = fmt.Sprintf("copy %d destination: ", i) + err.Detail
			return nil, err
		}
	}
	req := make([]fusion.PeerCopy, 0, len(copies))
	for i, c := range copies {
		r, err := peerRequest(op, i, c, dents[i], sents[i], dst == src)
		if err != nil {
			p.unpin()
			return nil, err
		}
		req = append(req, r)
	}
	if p.fused, p.bytes, err = fusion.FusePeerCopies(req); err != nil {
		p.unpin()
		return nil, &Error{Op: op, Kind: KindInvalidArgument, Detail: "fusing the copies failed",
			Fix: "split the copies; their addresses or lengths overflow", Err: err}
	}
	return p, nil
}

// peerRequest checks copy i's ranges and returns its device addresses.
func peerRequest(op string, i int, c PeerCopy, de, se *residentEntry, sameBackend bool) (fusion.PeerCopy, error) {
	if c.Len < 0 {
		return fusion.PeerCopy{}, newError(op, KindInvalidArgument, fmt.Sprintf("copy %d: length %d", i, c.Len),
			"pass a length of zero or more")
	}
	for _, side := range []struct {
		what     string
		h        Buffer
		off      int
		ptr      uint64
		fixRange string
	}{{"destination", c.Dst, c.DstOffset, de.ptr, "DstOffset"}, {"source", c.Src, c.SrcOffset, se.ptr, "SrcOffset"}} {
		if _, err := accounting.RangeEnd(side.off, c.Len, side.h.Len); err != nil {
			return fusion.PeerCopy{}, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("copy %d %s: %d bytes at offset %d do not fit handle %d's %d bytes: %s", i, side.what, c.Len, side.off, side.h.ID, side.h.Len, rangeWhy(side.off, c.Len, side.h.Len)),
				Fix:    "keep " + side.fixRange + "+Len within the buffer's length"}
		}
	}
	if sameBackend && c.Dst.ID == c.Src.ID && c.Len > 0 &&
		c.DstOffset < c.SrcOffset+c.Len && c.SrcOffset < c.DstOffset+c.Len {
		return fusion.PeerCopy{}, newError(op, KindInvalidArgument,
			fmt.Sprintf("copy %d: %d bytes from offset %d to offset %d of handle %d overlap", i, c.Len, c.SrcOffset, c.DstOffset, c.Dst.ID),
			"copy between ranges that do not overlap (stage through a second buffer)")
	}
	// Offsets are inside live allocations, so the sums cannot overflow.
	return fusion.PeerCopy{Dst: de.ptr + uint64(c.DstOffset), Src: se.ptr + uint64(c.SrcOffset), Len: c.Len}, nil
}

// link returns how b (the Backend owning c) reaches src's memory, asking
// the driver and enabling peer access the first time and remembering the
// answer. A link that cannot be enabled (the device refuses more peers, or
// no support) is remembered as PeerNone; other failures are returned and
// retried next time.
func (c *peerCache) link(op string, b, src *Backend) (PeerLink, error) {
	if b == src || b.drv == src.drv {
		return PeerSame, nil
	}
	pd, ok := b.drv.(PeerDriver)
	_, ok2 := src.drv.(PeerDriver)
	if !ok || !ok2 {
		return PeerNone, newError(op, KindUnsupported,
			fmt.Sprintf("the drivers %T and %T cannot copy between each other", b.drv, src.drv),
			"open both Backends with core.OpenCUDA or core.OpenDevices, or over devices of one sim.Machine")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.links[src]; ok {
		return l, nil
	}
	l, err := pd.PeerLink(src.drv)
	if err != nil {
		e := driverError(op, "PeerLink", err)
		e.Fix = "copy only between Backends of one machine: the real driver's, or one sim.Machine's devices"
		return PeerNone, e
	}
	if l == PeerDirect {
		if err := pd.EnablePeerAccess(src.drv); err != nil {
			var r cudaapi.Result
			if !errors.As(err, &r) || (r != cudaapi.CUDA_ERROR_TOO_MANY_PEERS && r != cudaapi.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) {
				return PeerNone, driverError(op, "EnablePeerAccess", err)
			}
			b.log.Warn("peer access could not be enabled; peer copies are staged through host memory",
				"device", b.info.Ordinal, "peer", src.info.Ordinal, "err", err)
			l = PeerNone
		}
	}
	if c.links == nil {
		c.links = make(map[*Backend]PeerLink)
	}
	c.links[src] = l
	return l, nil
}

// copyOnDevice queues the plan's copies on one leased stream of its
// destination Backend and waits for them (streams.Wait): device-to-device
// within that Backend's context, or peer copies from the source's device
// when peer is set. When ctx is done first, the rest of the wait goes to
// the background (later).
func (p *peerPlan) copyOnDevice(ctx context.Context, op string, peer bool) error {
	b := p.dst
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		return err
	}
	call := "MemcpyDtoDAsync"
	for _, c := range p.fused {
		if !peer {
			err = b.drv.MemcpyDtoDAsync(c.Dst, c.Src, uint64(c.Len), lease.Stream)
		} else {
			call = "MemcpyPeerAsync"
			err = b.drv.(PeerDriver).MemcpyPeerAsync(c.Dst, p.src.drv, c.Src, uint64(c.Len), lease.Stream)
		}
		if err != nil {
			syncPeerCopy(op, b, p, lease)
			return driverError(op, call, err)
		}
	}
	finish := func(err error) error {
		if err != nil {
			syncPeerCopy(op, b, p, lease)
			return driverError(op, "StreamSynchronize", err)
		}
		b.launch.Return(lease, true)
		b.tel.SyncPoints.Add(1)
		return nil
	}
	err = streams.Wait(ctx, b.drv, lease.Stream)
	if cause := ctx.Err(); err != nil && err == cause {
		p.later(op, func() error { return finish(b.drv.StreamSynchronize(lease.Stream)) })
		return peerCancelled(op, cause, true)
	}
	return finish(err)
}

// syncPeerCopy drains lease, b's stream of a failed copyOnDevice of p,
// or quarantines it with p's destination buffers. The copies read the
// source's buffers from b's stream: if it cannot be drained, the source
// (p.src, or b itself within one Backend) quarantines its own buffers,
// waiting for b's entry.
func syncPeerCopy(op string, b *Backend, p *peerPlan, lease *streams.Lease) {
	b.launch.SyncOrQuarantine(op, false, func() streams.Hold {
		out := b.xfer.Hold(op, held{Bufs: p.dstEnts})
		if len(p.srcEnts) > 0 {
			src := p.src
			if src == nil {
				src = b
			}
			out.Peer, out.PeerItems = src.launch, src.xfer.Hold(op, held{Bufs: p.srcEnts}).Items
		}
		return out
	}, lease)
}

// copyStaged moves the plan's bytes through one pinned block from dst's
// staging pool: src's stream copies them down, dst's stream waits for that
// with an event and copies them up, and the caller waits once, on dst's
// stream (or, when ctx is done first, a background goroutine does: later).
func copyStaged(ctx context.Context, op string, dst, src *Backend, p *peerPlan) error {
	if p.bytes > math.MaxInt {
		return newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", p.bytes),
			"split the copies into smaller calls")
	}
	st := new(hostmem.Staging)
	*st = hostmem.NewStaging(dst.hostPool)
	defer func() {
		if !p.handedOff {
			st.ReturnAll()
		}
	}()
	stage, err := st.Slice(op, int(p.bytes))
	if err != nil {
		return err
	}
	sl, err := src.launch.Lease(op, false)
	if err != nil {
		return err
	}
	dl, err := dst.launch.Lease(op, false)
	if err != nil {
		src.launch.Return(sl, true)
		return err
	}
	fail := func(call string, err error) error {
		if !src.xfer.SyncOrQuarantine(op, held{Bufs: p.srcEnts}, sl) {
			// src's undrained copies may still write the staging: keep it
			// out of the pool for good rather than hand it to another call.
			blocks := st.Detach()
			dst.log.Error("pinned staging of a failed peer copy is left allocated: the source stream could not be drained",
				"op", op, "blocks", len(blocks))
		}
		dst.xfer.SyncOrQuarantine(op, held{St: []*hostmem.Staging{st}, Bufs: p.dstEnts}, dl)
		return driverError(op, call, err)
	}
	if call, err := queueStaged(src, dst, p, stage, sl, dl); err != nil {
		return fail(call, err)
	}
	finish := func(err error) error {
		if err != nil {
			return fail("StreamSynchronize", err)
		}
		// dst's stream waited for src's event, so src's copies are done too.
		src.launch.Return(sl, true)
		dst.launch.Return(dl, true)
		dst.tel.SyncPoints.Add(1)
		src.tel.D2HBytes.Add(p.bytes)
		dst.tel.H2DBytes.Add(p.bytes)
		return nil
	}
	err = streams.Wait(ctx, dst.drv, dl.Stream)
	if cause := ctx.Err(); err != nil && err == cause {
		p.later(op, func() error {
			defer st.ReturnAll()
			return finish(dst.drv.StreamSynchronize(dl.Stream))
		})
		return peerCancelled(op, cause, true)
	}
	return finish(err)
}

// queueStaged queues a staged copy: src's copies down into stage on sl's
// stream, an event dl's stream waits for, and dst's copies up on dl's. It
// returns the driver call that failed, if one did.
func queueStaged(src, dst *Backend, p *peerPlan, stage []byte, sl, dl *streams.Lease) (string, error) {
	off := 0
	for _, c := range p.fused {
		end := off + c.Len
		if err := src.drv.MemcpyDtoHAsync(stage[off:end:end], c.Src, sl.Stream); err != nil {
			return "MemcpyDtoHAsync", err
		}
		off = end
	}
	if err := src.drv.EventRecord(sl.Done, sl.Stream); err != nil {
		return "EventRecord", err
	}
	if err := dst.drv.StreamWaitEvent(dl.Stream, sl.Done); err != nil {
		return "StreamWaitEvent", err
	}
	off = 0
	for _, c := range p.fused {
		end := off + c.Len
		if err := dst.drv.MemcpyHtoDAsync(c.Dst, stage[off:end:end], dl.Stream); err != nil {
			return "MemcpyHtoDAsync", err
		}
		off = end
	}
	return "", nil
}

// later hands the end of a copy whose caller stopped waiting to a
// goroutine: finish waits for the copy and gives back its streams and
// staging (or quarantines them when the stream fails), then the buffers
// are unpinned. Both Backends' Close wait for it (abandoned). The caller
// still holds both Backends entered, so Close cannot be waiting already.
func (p *peerPlan) later(op string, finish func() error) {
	p.handedOff = true
	bs := []*Backend{p.dst}
	if p.src != p.dst {
		bs = append(bs, p.src)
	}
	for _, b := range bs {
		b.abandoned.Add(1)
	}
	go func() {
		if err := finish(); err != nil {
			p.dst.log.Error("a peer copy whose caller stopped waiting failed on the device", "op", op, "err", err)
		}
		p.unpin()
		for _, b := range bs {
			b.abandoned.Done()
		}
	}()
}

// peerCancelled is the ErrInFlight, wrapping cause, of a peer copy whose
// context was done: before anything was queued, or while it waited.
func peerCancelled(op string, cause error, queued bool) *Error {
	if !queued {
		return &Error{Op: op, Kind: KindInFlight, Err: cause, Detail: "the context was done before the call; nothing was copied",
			Fix: "pass a live context"}
	}
	return &Error{Op: op, Kind: KindInFlight, Err: cause,
		Detail: "stopped waiting when the context was done; the copy still runs, and its buffers stay in flight on both Backends until it has finished",
		Fix:    "give the call more time, or free the buffers once the copy has finished (Free refuses them with ErrInFlight until then)"}
}
