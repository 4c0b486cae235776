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
//     read;
//   - DeviceCopies counts every DMA the device saw, PackedLaunches every
//     scatter and gather launch, and KernelLaunches only the steps.
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
		return nil
	}
	got := r.callsDelta()
	extra := int64(got[sim.OpLaunch]) - int64(len(it.kern))
	gathered := packRd && got[sim.OpMemcpyDtoHAsync] == 1
	if !gathered && got[sim.OpMemcpyDtoHAsync] != uint64(q.rdCopies) {
		return fmt.Errorf("%s: device calls %v for %d fused reads", call, got, q.rdCopies)
	}
	table := uint64(0)
	if gathered {
		table, extra = 1, extra-1
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
	q.h2d, q.d2h, q.packed = got[sim.OpMemcpyHtoDAsync], got[sim.OpMemcpyDtoHAsync], uint64(extra)+table
	return nil
}
