package core

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
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
	const op = "CopyPeer"
	if dst == nil || src == nil {
		return newError(op, KindInvalidArgument, fmt.Sprintf("destination Backend nil: %t, source Backend nil: %t", dst == nil, src == nil),
			"pass two open Backends")
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
	defer plan.unpin()
	if plan.bytes == 0 {
		return nil
	}
	link, err := dst.peerLinkTo(op, src)
	if err != nil {
		return err
	}
	switch link {
	case PeerSame:
		err = dst.copyOnDevice(op, plan, nil)
	case PeerDirect:
		err = dst.copyOnDevice(op, plan, src)
	default:
		err = copyStaged(op, dst, src, plan)
	}
	if err == nil {
		dst.tel.requested.Add(uint64(len(copies)))
		dst.tel.deviceCopies.Add(uint64(len(plan.fused)))
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
}

func (p *peerPlan) unpin() {
	p.dst.unpinEntries("CopyPeer", p.dstEnts)
	p.src.unpinEntries("CopyPeer", p.srcEnts)
}

// planPeer validates copies, pins their buffers and fuses them.
func planPeer(op string, dst, src *Backend, copies []PeerCopy) (*peerPlan, error) {
	dbufs := make([]Buffer, len(copies))
	sbufs := make([]Buffer, len(copies))
	for i, c := range copies {
		dbufs[i], sbufs[i] = c.Dst, c.Src
	}
	dents, err := dst.pinEntries(op, dbufs, func(i int) string { return fmt.Sprintf("copy %d destination: ", i) })
	if err != nil {
		return nil, err
	}
	sents, err := src.pinEntries(op, sbufs, func(i int) string { return fmt.Sprintf("copy %d source: ", i) })
	if err != nil {
		dst.unpinEntries(op, dents)
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
				Detail: fmt.Sprintf("copy %d %s: %d bytes at offset %d do not fit handle %d's %d bytes", i, side.what, c.Len, side.off, side.h.ID, side.h.Len),
				Fix:    "keep " + side.fixRange + "+Len within the buffer's length", Err: err}
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

// peerLinkTo returns how b reaches src's memory, asking the driver and
// enabling peer access the first time and remembering the answer. A link
// that cannot be enabled (the device refuses more peers, or no support) is
// remembered as PeerNone; other failures are returned and retried next
// time.
func (b *Backend) peerLinkTo(op string, src *Backend) (PeerLink, error) {
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
	b.peers.mu.Lock()
	defer b.peers.mu.Unlock()
	if l, ok := b.peers.links[src]; ok {
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
	if b.peers.links == nil {
		b.peers.links = make(map[*Backend]PeerLink)
	}
	b.peers.links[src] = l
	return l, nil
}

// copyOnDevice queues the plan's copies on one leased stream of b and
// waits for them: device-to-device within b's context when peer is nil,
// else peer copies from peer's device.
func (b *Backend) copyOnDevice(op string, p *peerPlan, peer *Backend) error {
	lease, err := b.lease(op, false)
	if err != nil {
		return err
	}
	// The copies read src's buffers from b's stream: if it cannot be
	// drained, src quarantines its own buffers (held.peer).
	h := held{ents: p.dstEnts, peer: p.src, peerEnts: p.srcEnts}
	call := "MemcpyDtoDAsync"
	for _, c := range p.fused {
		if peer == nil {
			err = b.drv.MemcpyDtoDAsync(c.Dst, c.Src, uint64(c.Len), lease.Stream)
		} else {
			call = "MemcpyPeerAsync"
			err = b.drv.(PeerDriver).MemcpyPeerAsync(c.Dst, peer.drv, c.Src, uint64(c.Len), lease.Stream)
		}
		if err != nil {
			b.drain(op, h, lease)
			return driverError(op, call, err)
		}
	}
	if err := b.drv.StreamSynchronize(lease.Stream); err != nil {
		b.drain(op, h, lease)
		return driverError(op, "StreamSynchronize", err)
	}
	b.launch.giveBack(lease, true)
	b.tel.syncPoints.Add(1)
	return nil
}

// copyStaged moves the plan's bytes through one pinned block from dst's
// staging pool: src's stream copies them down, dst's stream waits for that
// with an event and copies them up, and the caller waits once, on dst's
// stream.
func copyStaged(op string, dst, src *Backend, p *peerPlan) error {
	if p.bytes > math.MaxInt {
		return newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", p.bytes),
			"split the copies into smaller calls")
	}
	st := newStaging(dst.hostPool)
	defer st.release()
	stage, err := st.take(op, int(p.bytes))
	if err != nil {
		return err
	}
	sl, err := src.lease(op, false)
	if err != nil {
		return err
	}
	dl, err := dst.lease(op, false)
	if err != nil {
		src.launch.giveBack(sl, true)
		return err
	}
	fail := func(call string, err error) error {
		if !src.drain(op, held{ents: p.srcEnts}, sl) {
			// src's undrained copies may still write the staging: keep it
			// out of the pool for good rather than hand it to another call.
			blocks := st.detach()
			dst.log.Error("pinned staging of a failed peer copy is left allocated: the source stream could not be drained",
				"op", op, "blocks", len(blocks))
		}
		dst.drain(op, held{st: []*staging{&st}, ents: p.dstEnts}, dl)
		return driverError(op, call, err)
	}
	off := 0
	for _, c := range p.fused {
		end := off + c.Len
		if err := src.drv.MemcpyDtoHAsync(stage[off:end:end], c.Src, sl.Stream); err != nil {
			return fail("MemcpyDtoHAsync", err)
		}
		off = end
	}
	if err := src.drv.EventRecord(sl.Done, sl.Stream); err != nil {
		return fail("EventRecord", err)
	}
	if err := dst.drv.StreamWaitEvent(dl.Stream, sl.Done); err != nil {
		return fail("StreamWaitEvent", err)
	}
	off = 0
	for _, c := range p.fused {
		end := off + c.Len
		if err := dst.drv.MemcpyHtoDAsync(c.Dst, stage[off:end:end], dl.Stream); err != nil {
			return fail("MemcpyHtoDAsync", err)
		}
		off = end
	}
	if err := dst.drv.StreamSynchronize(dl.Stream); err != nil {
		return fail("StreamSynchronize", err)
	}
	// dst's stream waited for src's event, so src's copies are done too.
	src.launch.giveBack(sl, true)
	dst.launch.giveBack(dl, true)
	dst.tel.syncPoints.Add(1)
	src.tel.d2hBytes.Add(p.bytes)
	dst.tel.h2dBytes.Add(p.bytes)
	return nil
}
