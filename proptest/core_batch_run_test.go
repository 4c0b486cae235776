package proptest

// Running a drawn batch on the Backend with Run or RunAsync, and judging it:
// a refused batch changes nothing, a failed one may have written any byte it
// targets, and a successful one is applied to the model in the documented
// order, its reads checked and its device calls and telemetry counted.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// run runs the batch step: over the dispatcher with runOpt, else on the
// Backend with Run, or with RunAsync and then AwaitInto.
func (s *batchStep) run(r *runner) error {
	if s.opt {
		o, err := r.optimizer()
		if err != nil {
			return err
		}
		if o.content == nil {
			o.content = &optContent{o: o, bufs: map[uint64]*mbuf{}}
		}
		return s.runOpt(r, o, o.content)
	}
	it := r.resolveBatch(s, nil)
	b := it.batch()
	r.logf("batch %s: %d clears %d fills %d uploads %d steps %d reads", s, len(b.Clears), len(b.Fills), len(b.Uploads), len(b.Steps), len(b.Reads))
	dst := s.dst.slots2()
	before := snap2(dst)
	var (
		got    [][]byte
		err    error
		call   = "Run"
		queued = -1
	)
	if s.api == 0 {
		got, err = r.b.Run(b, dst)
	} else {
		call = "RunAsync"
		var p *core.Pending
		p, err = r.b.RunAsync(b)
		if err == nil {
			if p == nil {
				return fmt.Errorf("RunAsync returned no Pending and no error")
			}
			got, err = p.AwaitInto(dst)
			call, queued = "AwaitInto", 1
			if err != nil {
				if cerr := p.Close(); cerr != nil {
					return fmt.Errorf("Pending.Close after a failed AwaitInto: %v", cerr)
				}
			}
		} else if p != nil {
			return fmt.Errorf("failed RunAsync returned a Pending")
		} else {
			queued = 0
		}
	}
	return r.judgeBatch(call, it, modelContent{r.m}, err, got, dst, before, queued)
}

// judgeBatch judges a batch's outcome and applies its effects to c.
// queued says whether the work was queued before the failure: yes (1), no
// (0) or unknown (-1, a synchronous Run, whose telemetry then tells).
func (r *runner) judgeBatch(call string, it *batchItems, c content, err error, got, dst [][]byte, before snapshot, queued int) error {
	out, verr := r.judge(call, err, it.allowed(err))
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if dst != nil && !snap2(got).equal(before) && got != nil {
			return fmt.Errorf("failed %s changed the caller's output slots", call)
		}
		if out == rejected {
			return r.noCalls(call + " rejected")
		}
		// Queueing counts the work; a failure after it (at the fence)
		// leaves the counts. A failed Run may have failed either way.
		q := it.queued()
		landing, mayLand := r.failedLanding(call, it)
		if queued != 0 && !r.cfg.shared && r.observeBatch(call, it, &q) != nil {
			q = it.queued() // not all of it was queued
		}
		switch {
		case queued == 1:
			q.add(&r.m.tel)
		case queued < 0 && !r.cfg.shared:
			for _, c := range []batchTel{q, landing}[:1+b2i(mayLand)] {
				with := r.m.tel
				c.add(&with)
				if r.b.Telemetry() == with {
					r.m.tel = with
					break
				}
			}
		}
		for _, h := range it.clears {
			c.forget(h.ID, span{0, h.Len})
			r.failedTargets(h.ID, span{0, h.Len})
		}
		for _, h := range it.fills {
			c.forget(h.ID, span{0, h.Len})
			r.failedTargets(h.ID, span{0, h.Len})
		}
		for i, h := range it.ups {
			x := span{it.upOff[i], it.upOff[i] + len(it.upData[i])}
			c.forget(h.ID, x)
			r.failedTargets(h.ID, x)
		}
		for _, k := range it.kern {
			d := k.Bufs[len(k.Bufs)-1]
			x := span{0, d.Len / 4 * 4}
			c.forget(d.ID, x)
			r.failedTargets(d.ID, x)
		}
		for _, h := range it.reads {
			r.failedTargets(h.ID, span{})
		}
		return nil
	}
	return r.applyBatch(call, it, c, got)
}

// applyBatch applies a successful batch in its documented order, checks the
// reads and the device calls, and moves the telemetry.
func (r *runner) applyBatch(call string, it *batchItems, c content, got [][]byte) error {
	for _, h := range it.clears {
		c.write(h.ID, 0, make([]byte, h.Len))
	}
	for i, h := range it.fills {
		c.write(h.ID, 0, bytes.Repeat([]byte{it.fillValue(i)}, h.Len))
	}
	for i, h := range it.ups {
		c.write(h.ID, it.upOff[i], it.upData[i])
	}
	for _, k := range it.kern {
		applyKernel(c, k)
	}
	if len(got) != len(it.rs) {
		return fmt.Errorf("%s returned %d read slots for %d reads", call, len(got), len(it.rs))
	}
	for i, x := range it.rs {
		if len(got[i]) != x.Len {
			return fmt.Errorf("%s read %d has %d bytes, want %d", call, i, len(got[i]), x.Len)
		}
		if x.Len == 0 {
			continue
		}
		if err := c.check(x.Buf.ID, x.Offset, got[i]); err != nil {
			return fmt.Errorf("%s read %d: %w", call, i, err)
		}
	}
	q := it.queued()
	if q.work == 0 {
		return r.noCalls(call + " of an empty batch")
	}
	if err := r.observeBatch(call, it, &q); err != nil {
		return err
	}
	q.add(&r.m.tel)
	memsets := len(it.clears) + len(it.fills)
	// Only work handed out as a Pending (collected here by AwaitInto) can be
	// polled, so only it records a completion event; Run waits with the fence,
	// or, when its read lands in chunks after the work, with an event after
	// each chunk and no fence (each landing a sync point).
	var records, syncs uint64 = 0, 1
	if call == "AwaitInto" {
		records = 1
	}
	if q.landed {
		records, syncs = q.d2h, 0
		r.m.tel.SyncPoints += q.d2h
	} else {
		r.m.tel.SyncPoints++
	}
	want := map[sim.Op]uint64{sim.OpMemsetD8Async: uint64(memsets), sim.OpLaunch: uint64(len(it.kern)) + q.packed,
		sim.OpLaunchProgrammatic: programmaticLaunches(it.kern), sim.OpMemcpyHtoDAsync: q.h2d, sim.OpMemcpyDtoHAsync: q.d2h,
		sim.OpStreamSynchronize: syncs, sim.OpEventRecord: records}
	if q.landed {
		want[sim.OpEventQuery] = r.callsDelta()[sim.OpEventQuery]
	}
	return r.expectTransfer(call, want)
}

// fillValue is the byte fill i writes.
func (it *batchItems) fillValue(i int) byte { return it.fillVals[i] }

// batchTel is what queueing a batch adds to the telemetry (documented: the
// work queued, fused copies and requested ones, one upload and one readback
// operation when it moves bytes); the fence that waits for it adds one
// synchronization.
type batchTel struct {
	work, upCopies, rdCopies int
	tel                      core.Telemetry
	h2d, d2h, packed         uint64 // DMAs each way and packed launches (observeBatch)
	landed                   bool   // the one read landed in chunks after the work (observeBatch)
}

// queued works out what queueing the batch adds to the telemetry, with the
// copies fused per handle as package fusion documents.
func (it *batchItems) queued() batchTel {
	ups, reads := map[uint64][]span{}, map[uint64][]span{}
	nUps, nReads := 0, 0
	for i, h := range it.ups {
		if len(it.upData[i]) > 0 {
			nUps++
			ups[h.ID] = append(ups[h.ID], span{it.upOff[i], it.upOff[i] + len(it.upData[i])})
		}
	}
	for _, x := range it.rs {
		if x.Len > 0 {
			nReads++
			reads[x.Buf.ID] = append(reads[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
		}
	}
	upBytes, upCopies := unionStats(ups)
	rdBytes, rdCopies := unionStats(reads)
	memsets := len(it.clears) + len(it.fills)
	q := batchTel{work: memsets + upCopies + len(it.kern) + rdCopies, upCopies: upCopies, rdCopies: rdCopies,
		h2d: uint64(upCopies), d2h: uint64(rdCopies)}
	q.tel = core.Telemetry{MemsetOps: uint64(memsets), KernelLaunches: uint64(len(it.kern)),
		HostToDeviceBytes: upBytes, DeviceToHostBytes: rdBytes,
		RequestedCopies: uint64(nUps + nReads), DeviceCopies: uint64(upCopies + rdCopies)}
	if upBytes > 0 {
		q.tel.UploadOps = 1
	}
	if rdBytes > 0 {
		q.tel.ReadbackOps = 1
	}
	return q
}

// add adds what the batch queued to t; the device copies and packed
// launches are those observeBatch saw.
func (q batchTel) add(t *core.Telemetry) {
	t.MemsetOps += q.tel.MemsetOps
	t.KernelLaunches += q.tel.KernelLaunches
	t.HostToDeviceBytes += q.tel.HostToDeviceBytes
	t.DeviceToHostBytes += q.tel.DeviceToHostBytes
	t.UploadOps += q.tel.UploadOps
	t.ReadbackOps += q.tel.ReadbackOps
	t.RequestedCopies += q.tel.RequestedCopies
	t.DeviceCopies += q.h2d + q.d2h
	t.PackedLaunches += q.packed
}

// applyKernel applies one step's documented effect: each kernel touches the
// whole u32 elements of the buffer its count comes from (the last bound).
func applyKernel(c content, k core.Step) {
	d := k.Bufs[len(k.Bufs)-1]
	n := d.Len / 4 * 4
	if n == 0 {
		return
	}
	data, unknown := c.bytesOf(d.ID)
	out := make([]byte, n)
	switch k.Program {
	case core.ProgramFillU32():
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(out[i:], k.Config.Scalars[0])
		}
		c.write(d.ID, 0, out)
	case core.ProgramCopyU32():
		sdata, sunknown := c.bytesOf(k.Bufs[0].ID)
		copy(out, sdata[:n])
		c.write(d.ID, 0, out)
		for _, x := range sunknown {
			if o := (span{x.off, min(x.end, n)}); o.off < o.end {
				c.forget(d.ID, o)
			}
		}
	default:
		copy(out, data[:n])
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(out[i:])^k.Config.Scalars[0])
		}
		unknown = slices.Clone(unknown)
		c.write(d.ID, 0, out)
		for _, x := range unknown {
			if o := (span{x.off, min(x.end, n)}); o.off < o.end {
				c.forget(d.ID, o)
			}
		}
	}
}

// batch is the drawn batch.
func (it *batchItems) batch() core.Batch {
	b := core.Batch{Clears: it.clears, Steps: it.kern, Reads: it.rs}
	for i, h := range it.fills {
		b.Fills = append(b.Fills, core.Fill{Buf: h, Value: it.fillVals[i]})
	}
	for i, h := range it.ups {
		b.Uploads = append(b.Uploads, core.UploadAt{Buf: h, Offset: it.upOff[i], Data: it.upData[i]})
	}
	return b
}
