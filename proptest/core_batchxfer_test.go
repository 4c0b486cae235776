package proptest

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/sim"
)

// Batches plan their transfers like the single calls (core's Batch): many
// small uploads may travel packed (one scatter launch, a few DMAs), one
// large upload may move in chunks of at least 64 KiB, and many small reads
// may be gathered (the table up, one gather launch, one DMA down). The
// contract the model checks for a queued batch:
//
//   - a scatter launch only for a batch of packMinCopies fused uploads or
//     more, with its data in at most one DMA per fused upload plus the
//     table; otherwise one DMA per fused upload, except that a single fused
//     upload may move in up to one DMA per started 64 KiB;
//   - a gather launch only for packMinCopies fused reads or more, with
//     one DMA down (and the table's DMA up); otherwise one DMA per fused
//     read, except that behind a kernel step, on a device that maps
//     pinned host memory, a fused read of 64 KiB to 2 MiB at a whole-word
//     address and of whole words is one copy-kernel launch instead (none
//     when the batch was planned packed and fell back to one copy each);
//   - a Run whose one read is one fused copy into Go memory may land it in
//     chunks after the work instead: one DMA and one event each, no
//     stream synchronization (runLanding);
//   - DeviceCopies counts every DMA the device saw, PackedLaunches every
//     scatter, gather and copy-kernel launch, and KernelLaunches only the
//     steps.
//
// In shared mode the calls of one goroutine cannot be told apart, so the
// batch only widens the bounds the concurrency property checks at the end.

// batchMinChunk is the smallest chunk of a single upload moved in parts.
const batchMinChunk = 64 << 10

// observeBatch fills q's DMA and packed-launch counts from the device calls
// of the step so far, checking them against the contract above.
func (r *runner) observeBatch(call string, it *batchItems, q *batchTel) error {
	packUp, packRd := q.upCopies >= packMinCopies, q.rdCopies >= packMinCopies
	if r.cfg.shared {
		for _, p := range []bool{packUp, packRd} {
			if p {
				r.m.packable++
			}
		}
		if q.upCopies == 1 {
			r.m.stageable++
		}
		r.m.packable += uint64(r.kernelReads(it)) // copy kernels count as packed launches
		return nil
	}
	got := r.callsDelta()
	extra := int64(got[sim.OpLaunch]) - int64(len(it.kern))
	byKernel := r.kernelReads(it)
	q.landed = r.runLanding(call, it, got)
	gathered := !q.landed && packRd && got[sim.OpMemcpyDtoHAsync] == 1 && (q.rdCopies-byKernel != 1 || extra <= 2)
	table, kernelReads := uint64(0), q.rdCopies-int(got[sim.OpMemcpyDtoHAsync])
	switch {
	case q.landed:
		kernelReads = 0
		countOutcome(call+" (read landed in chunks)", succeeded)
	case gathered:
		table, extra, kernelReads = 1, extra-1, 0
	case kernelReads != byKernel && !(packRd && kernelReads == 0):
		return fmt.Errorf("%s: device calls %v for %d fused reads, %d of them by a copy kernel", call, got, q.rdCopies, byKernel)
	default:
		extra -= int64(kernelReads)
	}
	up := got[sim.OpMemcpyHtoDAsync] - min(table, got[sim.OpMemcpyHtoDAsync])
	switch {
	case extra < 0 || extra > 1 || (extra == 1 && !packUp):
		return fmt.Errorf("%s: device calls %v: %d launches for %d steps (%d fused uploads, %d fused reads)",
			call, got, got[sim.OpLaunch], len(it.kern), q.upCopies, q.rdCopies)
	case extra == 1 && (up == 0 || up > uint64(q.upCopies)+1):
		return fmt.Errorf("%s (packed uploads): device calls %v for %d fused uploads", call, got, q.upCopies)
	case extra == 0 && q.upCopies == 1:
		if up == 0 || up > max(1, (q.tel.HostToDeviceBytes+batchMinChunk-1)/batchMinChunk) {
			return fmt.Errorf("%s: %d DMAs for one upload of %d bytes", call, up, q.tel.HostToDeviceBytes)
		}
	case extra == 0 && up != uint64(q.upCopies):
		return fmt.Errorf("%s: device calls %v for %d fused uploads", call, got, q.upCopies)
	}
	if extra == 1 || gathered {
		countOutcome(call+" (packed transfers)", succeeded)
	} else if up > 1 && q.upCopies == 1 {
		countOutcome(call+" (staged upload)", succeeded)
	}
	if kernelReads > 0 {
		countOutcome(call+" (reads by a copy kernel)", succeeded)
	}
	q.h2d, q.d2h, q.packed = got[sim.OpMemcpyHtoDAsync], got[sim.OpMemcpyDtoHAsync], uint64(extra)+table+uint64(kernelReads)
	return nil
}

// runLanding reports whether Run landed its read in chunks after the
// work, as its device calls show (an event recorded after each DMA down and
// no stream synchronized): allowed for one read request of at least
// batchMinStaged bytes whose destination is not pinned memory.
func (r *runner) runLanding(call string, it *batchItems, got map[sim.Op]uint64) bool {
	if call != "Run" || len(it.rs) != 1 || it.rs[0].Len < batchMinStaged {
		return false
	}
	d2h := got[sim.OpMemcpyDtoHAsync]
	return d2h >= 1 && got[sim.OpStreamSynchronize] == 0 && got[sim.OpEventRecord] == d2h
}

// failedLanding returns what a failed Run counted when it queued its work
// and then failed landing its read in chunks (runLanding): the batch's
// upload DMAs and launches as the device saw them, and no read DMA (a
// landing counts its chunks only once they all landed). ok is false when
// the call could not have landed its read.
func (r *runner) failedLanding(call string, it *batchItems) (q batchTel, ok bool) {
	got := r.callsDelta()
	if call != "Run" || r.cfg.shared || len(it.rs) != 1 || it.rs[0].Len < batchMinStaged {
		return batchTel{}, false
	}
	q = it.queued()
	q.h2d, q.d2h, q.landed = got[sim.OpMemcpyHtoDAsync], 0, true
	q.packed = got[sim.OpLaunch] - min(got[sim.OpLaunch], uint64(len(it.kern)))
	return q, true
}

// batchMinStaged is the smallest single read a Run may land in chunks
// (xferplan's default StageMin).
const batchMinStaged = 256 << 10

// Default bounds of a read a copy kernel writes (core.WithKernelReads).
const kernelReadMin, kernelReadMax = 64 << 10, 2 << 20

// kernelReads is how many of the batch's fused reads, read one copy each,
// a copy kernel writes: with a kernel step before them on a device that
// maps pinned host memory, those of 64 to 256 KiB whose device address and
// length are whole words.
func (r *runner) kernelReads(it *batchItems) int {
	if len(it.kern) == 0 || r.cfg.unmapped {
		return 0
	}
	reads := map[uint64][]span{}
	for _, x := range it.rs {
		if x.Len > 0 {
			reads[x.Buf.ID] = append(reads[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
		}
	}
	n := 0
	for id, list := range reads {
		var u spans
		for _, x := range list {
			u = u.add(x)
		}
		for _, x := range u {
			if r.copyKernelWrites(id, x.off, x.end-x.off) {
				n++
			}
		}
	}
	return n
}

// copyKernelWrites reports whether a read of n bytes at off in buffer id,
// one copy behind a kernel step, is written by a copy kernel: the device
// maps pinned host memory, n lies within the default bounds, and the
// device address and n are whole words.
func (r *runner) copyKernelWrites(id uint64, off, n int) bool {
	b := r.m.bufs[id]
	return !r.cfg.unmapped && n >= kernelReadMin && n <= kernelReadMax && (b == nil || (b.ptr+uint64(off)|uint64(n))&3 == 0)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
