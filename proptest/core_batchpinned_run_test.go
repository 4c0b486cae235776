package proptest

// The runs and checks of TestCoreBatchPinnedAgreesWithModel
// (core_batchpinned_test.go).

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
)

// checkRun runs the batch with Run and checks it.
func (e *pinEnv) checkRun(what string) error {
	if err := e.reset(); err != nil {
		return err
	}
	dst := e.dst()
	out, err := e.b.Run(e.batch, dst)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = e.check(what, pinRun, out, dst, e.data)
	return err
}

// checkAsync submits the batch with submit (RunAsync or ReplayAsync),
// rewrites every upload's Data at once, and collects the work with Await
// then AwaitInto, checking the pinned memory in flight until then, which
// bytes each upload sent (direct ones read their Data when the work runs,
// on the lazy simulated device; the others were copied at submission) and
// that direct reads had landed before AwaitInto.
func (e *pinEnv) checkAsync(submit func() (*core.Pending, error), form int, what string) (reads, sent [][]byte, err error) {
	dst := e.dst()
	pd, err := submit()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	defer pd.Close()
	sent = make([][]byte, len(e.data))
	direct := e.c.directUps()
	for i, d := range e.data {
		sent[i] = bytes.Clone(d)
		e.r.Read(d)
		if direct[i] {
			sent[i] = bytes.Clone(d)
		}
	}
	if err := e.busy(what + " uncollected"); err != nil {
		return nil, nil, err
	}
	if err := pd.Await(); err != nil {
		return nil, nil, fmt.Errorf("%s: Await: %w", what, err)
	}
	_, want := e.c.model(e.init, sent)
	dRd := e.c.directReads(form)
	for i, d := range e.c.reads {
		if d.n == 0 || !e.c.into || d.into == memNone {
			continue
		}
		into := e.batch.Into[i]
		if dRd[i] && !bytes.Equal(into, want[i]) {
			return nil, nil, fmt.Errorf("%s: read %d into pinned Into holds %x after Await, want %x (a DMA straight into it)", what, i, into, want[i])
		}
		if !dRd[i] && !bytes.Equal(into, bytes.Repeat([]byte{0xee}, d.n)) {
			return nil, nil, fmt.Errorf("%s: read %d into staged Into changed before AwaitInto: %x", what, i, into)
		}
	}
	if len(e.c.reads) > 0 {
		if err := e.busy(what + " awaited, reads uncollected"); err != nil {
			return nil, nil, err
		}
	}
	out, err := pd.AwaitInto(dst)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: AwaitInto: %w", what, err)
	}
	reads, err = e.check(what, form, out, dst, sent)
	return reads, sent, err
}

// checkGraph captures the batch and replays it with new upload bytes each
// time, checking each replay against the model and against Run of the
// same batch from the same state, and the pinned memory in flight until
// Close.
func (e *pinEnv) checkGraph() error {
	g, err := e.b.Capture(e.batch)
	if err != nil {
		return fmt.Errorf("Capture: %w", err)
	}
	defer g.Close()
	if err := e.busy("captured"); err != nil {
		return err
	}
	for k, async := range e.c.replays {
		if err := e.reset(); err != nil {
			return err
		}
		for _, d := range e.data {
			e.r.Read(d)
		}
		var reads, sent [][]byte
		if async {
			reads, sent, err = e.checkAsync(g.ReplayAsync, pinGraph, fmt.Sprintf("ReplayAsync %d", k))
		} else {
			dst := e.dst()
			var out [][]byte
			if out, err = g.Replay(dst); err != nil {
				return fmt.Errorf("Replay %d: %w", k, err)
			}
			sent = bytes2(e.data)
			reads, err = e.check(fmt.Sprintf("Replay %d", k), pinReplay, out, dst, sent)
		}
		if err != nil {
			return err
		}
		if err := e.busy("graph open"); err != nil {
			return err
		}
		// Run the same batch, with the bytes the replay sent, from the
		// same state.
		copy2(e.data, sent)
		if err := e.reset(); err != nil {
			return err
		}
		dst := e.dst()
		out, err := e.b.Run(e.batch, dst)
		if err != nil {
			return fmt.Errorf("Run after replay %d: %w", k, err)
		}
		if _, err := e.check(fmt.Sprintf("Run after replay %d", k), pinRun, out, dst, e.data); err != nil {
			return err
		}
		for i := range out {
			if !bytes.Equal(out[i], reads[i]) {
				return fmt.Errorf("replay %d read %d: %x, Run of the same batch: %x", k, i, reads[i], out[i])
			}
		}
	}
	return wrapErr("Graph.Close", g.Close())
}

// check compares one run's results (out, from dst) with the model of the
// batch run in form with upload bytes sent: each read's bytes and result
// slot, the telemetry, then every buffer's bytes. It returns the reads'
// bytes, copied.
func (e *pinEnv) check(what string, form int, out, dst, sent [][]byte) ([][]byte, error) {
	after, want := e.c.model(e.init, sent)
	if len(out) != len(want) {
		return nil, fmt.Errorf("%s: %d result slots for %d reads", what, len(out), len(want))
	}
	for i, d := range e.c.reads {
		if !bytes.Equal(out[i], want[i]) {
			return nil, fmt.Errorf("%s: read %d (%+v) holds %x, want %x", what, i, d, out[i], want[i])
		}
		if err := e.checkSlot(i, out[i], dst[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	tel := e.b.Telemetry()
	wt := e.c.wantTelemetry(form)
	got := [...]uint64{tel.HostToDeviceBytes, tel.DeviceToHostBytes, tel.UploadOps, tel.ReadbackOps, tel.RequestedCopies,
		tel.MemsetOps, tel.KernelLaunches, tel.SyncPoints}
	exp := [...]uint64{wt.HostToDeviceBytes, wt.DeviceToHostBytes, wt.UploadOps, wt.ReadbackOps, wt.RequestedCopies,
		wt.MemsetOps, wt.KernelLaunches, wt.SyncPoints}
	if n := tel.SyncPoints; e.c.mayLand(form) && n >= 1 && n <= uint64(e.c.reads[0].n) {
		exp[7] = n // landed in n chunks of at least a byte (or one fence)
		e.landed += int(b2u(n > 1))
	}
	if got != exp {
		return nil, fmt.Errorf("%s: telemetry (H2D, D2H, upload ops, readback ops, requested, memsets, launches, syncs) %v, want %v",
			what, got, exp)
	}
	all := make([]core.Range, len(e.hs))
	for i, h := range e.hs {
		all[i] = h.All()
	}
	dev, err := e.b.DownloadMany(all, nil)
	if err != nil {
		return nil, err
	}
	for i := range dev {
		if !bytes.Equal(dev[i], after[i]) {
			return nil, fmt.Errorf("%s: buffer %d holds %x, want %x", what, i, dev[i], after[i])
		}
	}
	return bytes2(out), nil
}

// checkSlot checks read i's result slot: Into[i] itself where given, else
// the storage of its dst slot when that holds the read, else storage of its
// own (in no pinned memory of the case).
func (e *pinEnv) checkSlot(i int, got, slot []byte) error {
	d := e.c.reads[i]
	switch {
	case e.c.into && d.into != memNone:
		if into := e.batch.Into[i]; unsafe.SliceData(got) != unsafe.SliceData(into) || len(got) != len(into) {
			return fmt.Errorf("read %d's slot is not its Into", i)
		}
	case slot != nil && cap(slot) >= d.n:
		if unsafe.SliceData(got) != unsafe.SliceData(slot) {
			return fmt.Errorf("read %d's dst slot of %d bytes' capacity was not reused", i, cap(slot))
		}
	case d.n > 0:
		if e.inPinned(got) {
			return fmt.Errorf("read %d landed in pinned memory it was not given", i)
		}
	}
	return nil
}

// inPinned reports whether p starts in the case's pinned memory.
func (e *pinEnv) inPinned(p []byte) bool {
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, m := range [][]byte{e.p.Bytes(), e.reg} {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		if at >= start && at < start+uintptr(len(m)) {
			return true
		}
	}
	return false
}

func bytes2(s [][]byte) [][]byte {
	out := make([][]byte, len(s))
	for i := range s {
		out[i] = bytes.Clone(s[i])
	}
	return out
}

func copy2(dst, src [][]byte) {
	for i := range dst {
		copy(dst[i], src[i])
	}
}
