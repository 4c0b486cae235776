package proptest

// Batches and transfer verbs over an OptimizerDispatcher's Buffers: Run with
// everything drawn, the upload verbs with the draw's uploads, the download
// verbs with its reads, and how each is judged; and the drain of a
// quarantine through a dispatcher buffer at the end of a sequence.

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// runOpt runs Run with everything drawn, or one transfer verb with the
// uploads or the reads of the draw, over the dispatcher's Buffers.
func (s *batchStep) runOpt(r *runner, o *optModel, c *optContent) error {
	it := r.resolveBatch(s, o)
	call := "opt." + optCalls[s.api]
	switch optCalls[s.api] {
	case "Run":
		dst := s.dst.slots2()
		before := snap2(dst)
		b := it.batch()
		r.logf("%s %+v", call, b)
		got, err := r.b.Run(b, dst)
		return r.judgeBatch(call, it, c, err, got, dst, before, -1)
	case "UploadSlice", "UploadWhole", "UploadAt":
		return s.optUploads(r, it, c)
	default:
		return s.optReads(r, it, c)
	}
}

// optUploads runs UploadSlice (the first upload, of exactly the buffer's
// length), Upload of every upload from offset 0 (whole buffers), or Upload
// of the drawn uploads.
func (s *batchStep) optUploads(r *runner, it *batchItems, c content) error {
	label := optCalls[s.api]
	call := "opt." + label
	it.clears, it.fills, it.kern, it.reads, it.rs = nil, nil, nil, nil, nil
	if len(it.ups) == 0 {
		return nil
	}
	if label != "UploadAt" {
		for i, h := range it.ups {
			it.upOff[i] = 0
			if s.upAt[i].mode >= placeZero && h.Len > 0 {
				it.upData[i] = patternData(s.seeds[i], h.Len)
			}
			it.badUp[i] = !rangeOK(0, len(it.upData[i]), h.Len)
			if label == "UploadSlice" {
				it.badUp[i] = len(it.upData[i]) != h.Len // exactly the buffer's length
			}
		}
	}
	if label == "UploadSlice" {
		it.ups, it.upData, it.upOff, it.badUp = it.ups[:1], it.upData[:1], it.upOff[:1], it.badUp[:1]
	}
	it.recheck()
	r.logf("%s %d uploads", call, len(it.ups))
	var err error
	if label == "UploadSlice" {
		err = core.UploadSlice(r.b, it.ups[0], it.upData[0])
	} else {
		ups := make([]core.UploadAt, len(it.ups))
		for i, h := range it.ups {
			ups[i] = core.UploadAt{Buf: h, Offset: it.upOff[i], Data: it.upData[i]}
		}
		err = r.b.Upload(ups...)
	}
	return r.judgeTransfer(call, it, c, err, nil, true)
}

// optReads runs Download (the first read, whole), DownloadMany of every
// read's whole buffer into new slices, or DownloadMany of the drawn ranges
// into caller slots.
func (s *batchStep) optReads(r *runner, it *batchItems, c content) error {
	label := optCalls[s.api]
	call := "opt." + label
	it.clears, it.fills, it.kern, it.ups, it.upData, it.upOff, it.badUp = nil, nil, nil, nil, nil, nil, nil
	if len(it.rs) == 0 {
		return nil
	}
	if label != "DownloadRanges" {
		for i, x := range it.rs {
			it.rs[i] = x.Buf.All()
		}
	}
	if label == "Download" {
		it.rs, it.reads = it.rs[:1], it.reads[:1]
	}
	it.recheck()
	r.logf("%s %d reads", call, len(it.rs))
	var (
		got [][]byte
		err error
	)
	switch label {
	case "Download":
		var one []byte
		one, err = r.b.Download(it.rs[0], nil)
		got = [][]byte{one}
		if err != nil && one != nil {
			return fmt.Errorf("failed %s returned bytes", call)
		}
	case "DownloadWhole":
		got, err = r.b.DownloadMany(it.rs, nil)
		if err != nil && got != nil {
			return fmt.Errorf("failed %s returned slots", call)
		}
	default:
		dst := s.dst.slots2()
		before := snap2(dst)
		got, err = r.b.DownloadMany(it.rs, dst)
		if err != nil && !snap2(got).equal(before) {
			return fmt.Errorf("failed %s changed the caller's output slots", call)
		}
	}
	return r.judgeTransfer(call, it, c, err, got, false)
}

// judgeTransfer judges a transfer verb over the dispatcher's Buffers: on
// success the bytes, the device calls and telemetry of the transfer.
func (r *runner) judgeTransfer(call string, it *batchItems, c content, err error, got [][]byte, upload bool) error {
	want := it.allowed(err)
	if upload {
		r.allowOOM = len(it.ups) >= packMinCopies
	} else {
		r.allowOOM = len(it.rs) >= packMinCopies
	}
	r.packable = r.allowOOM
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out == rejected {
		return r.noCalls(call + " rejected")
	}
	if out == faulted {
		for i, h := range it.ups {
			x := span{it.upOff[i], it.upOff[i] + len(it.upData[i])}
			c.forget(h.ID, x)
			r.failedTargets(h.ID, x)
		}
		for _, x := range it.rs {
			r.failedTargets(x.Buf.ID, span{})
		}
		return nil
	}
	byHandle := map[uint64][]span{}
	nonEmpty := 0
	t := &r.m.tel
	if upload {
		for i, h := range it.ups {
			if len(it.upData[i]) == 0 {
				continue
			}
			nonEmpty++
			c.write(h.ID, it.upOff[i], it.upData[i])
			byHandle[h.ID] = append(byHandle[h.ID], span{it.upOff[i], it.upOff[i] + len(it.upData[i])})
		}
	} else {
		if len(got) != len(it.rs) {
			return fmt.Errorf("%s returned %d results for %d reads", call, len(got), len(it.rs))
		}
		for i, x := range it.rs {
			if len(got[i]) != x.Len {
				return fmt.Errorf("%s result %d has %d bytes, want %d", call, i, len(got[i]), x.Len)
			}
			if x.Len == 0 {
				continue
			}
			nonEmpty++
			byHandle[x.Buf.ID] = append(byHandle[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
			if err := c.check(x.Buf.ID, x.Offset, got[i]); err != nil {
				return fmt.Errorf("%s result %d: %w", call, i, err)
			}
		}
	}
	if nonEmpty == 0 {
		return r.noCalls(call + " of nothing")
	}
	moved, copies := unionStats(byHandle)
	op := sim.OpMemcpyDtoHAsync
	if upload {
		t.HostToDeviceBytes += moved
		t.UploadOps++
		op = sim.OpMemcpyHtoDAsync
	} else {
		t.DeviceToHostBytes += moved
		t.ReadbackOps++
	}
	t.SyncPoints++
	t.RequestedCopies += uint64(nonEmpty)
	return r.expectPath(call, copies, op)
}

// drainThroughDispatcher is drainProbe's fallback when the runner holds no
// live buffer but the dispatcher does: a read of one of its ids acquires a
// lease, which drains the quarantine (faults are disarmed), before the
// dispatcher's Close, which refuses buffers the quarantine still holds.
func (r *runner) drainThroughDispatcher() error {
	if r.opt == nil {
		return nil
	}
	for _, id := range r.opt.order {
		n, ok := r.opt.ids[id]
		if !ok {
			continue
		}
		got, err := r.b.Download(core.Buffer{ID: id, Len: n}.All(), nil)
		if err != nil || len(got) != n {
			return fmt.Errorf("Download of a dispatcher buffer after faults were disarmed, with a quarantine: %d bytes, %v", len(got), err)
		}
		if q := r.b.LaunchResourceCounts().Quarantined; q != 0 {
			return fmt.Errorf("a lease acquisition with faults disarmed left %d quarantined lease(s)", q)
		}
		t := &r.m.tel
		t.DeviceToHostBytes += uint64(n)
		t.ReadbackOps++
		t.SyncPoints++
		t.RequestedCopies++
		t.DeviceCopies++
		return nil
	}
	return nil
}
