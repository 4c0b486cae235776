package core

import (
	"fmt"
	"math"
	"sort"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/fusion"
)

// Fill sets every byte of Buf to Value by device memset.
type Fill struct {
	Buf   Buffer
	Value byte
}

// Step is one kernel launch of a Batch: Program over Bufs (in the program's
// order) with Config.
type Step struct {
	Program *Program
	Bufs    []Buffer
	Config  DispatchConfig
}

// Batch is one request of device work, run on one stream with one fence, in
// this order: Clears and Fills (device memsets, no host-to-device bytes),
// then Uploads (fused and staged like UploadResidentAtMany), then Steps in
// order, each seeing what the ones before it wrote, then Reads (fused like
// DownloadResidentRangesInto) of what the last step left.
type Batch struct {
	Clears  []Buffer   // zeroed by device memset
	Fills   []Fill     // set to a byte value by device memset
	Uploads []UploadAt // written from host memory
	Steps   []Step     // kernel launches, in order
	Reads   []Range    // read back after the last step
}

// Run runs batch and waits for it with one fence. The bytes of Reads come
// back in dst's slots, one per read in order, append-style (slot i reuses
// the capacity of dst's i-th slice; dst's capacity is reused for the
// slots). Everything is validated before anything is queued: a bad handle,
// range, program arity, scalar count or buffer length fails the call with
// nothing changed. On failure dst is returned unchanged.
func (b *Backend) Run(batch Batch, dst [][]byte) ([][]byte, error) {
	const op = "Run"
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	p, err := b.enqueue(op, &batch)
	if err != nil {
		return dst, err
	}
	return p.AwaitInto(dst)
}

// RunAsync validates and queues batch like Run and returns without waiting.
// The returned Pending holds every buffer the batch names in flight until
// the work completes; collect it with Await, AwaitInto (for the reads) or
// Close. Upload data is copied into staging before RunAsync returns, so the
// caller may reuse it at once.
func (b *Backend) RunAsync(batch Batch) (*Pending, error) {
	const op = "RunAsync"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	return b.enqueue(op, &batch)
}

// batchLayout maps a position in the flat list of buffers a batch names to
// the item it came from, for messages.
type batchLayout struct {
	clears, fills, uploads, steps, reads int   // section starts
	stepStarts                           []int // start of each step's buffers
}

func (l *batchLayout) label(i int) string {
	switch {
	case i < l.fills:
		return fmt.Sprintf("clear %d: ", i-l.clears)
	case i < l.uploads:
		return fmt.Sprintf("fill %d: ", i-l.fills)
	case i < l.steps:
		return fmt.Sprintf("upload %d: ", i-l.uploads)
	case i < l.reads:
		s := sort.Search(len(l.stepStarts), func(k int) bool { return l.stepStarts[k] > i }) - 1
		return fmt.Sprintf("step %d buffer %d: ", s, i-l.stepStarts[s])
	}
	return fmt.Sprintf("read %d: ", i-l.reads)
}

// launchPlan is one validated step.
type launchPlan struct {
	fn   Function
	cfg  LaunchConfig
	args []KernelArg
}

// enqueue validates batch, queues it on one leased stream and returns the
// Pending that owns what it holds. Validation, module loading and staging
// all happen before the first operation is queued.
func (b *Backend) enqueue(op string, batch *Batch) (*Pending, error) {
	// Shapes first: nothing here needs the resident table.
	lay := batchLayout{stepStarts: make([]int, len(batch.Steps))}
	n := len(batch.Clears) + len(batch.Fills) + len(batch.Uploads)
	lay.fills = len(batch.Clears)
	lay.uploads = lay.fills + len(batch.Fills)
	lay.steps = n
	plans := make([]launchPlan, len(batch.Steps))
	counts := make([]uint32, len(batch.Steps))
	nArgs := 0
	timing := false
	stepBufs := make([][]Buffer, len(batch.Steps)) // a typed step's buffers come from its Args
	for i := range batch.Steps {
		s := &batch.Steps[i]
		if s.Program == nil {
			return nil, newError(op, KindInvalidArgument, fmt.Sprintf("step %d: program is nil", i),
				"build the program with NewProgram or use a built-in such as ProgramVAddU32")
		}
		stepBufs[i] = s.Bufs
		if s.Program.typed() {
			var err error
			if stepBufs[i], err = s.Program.typedBuffers(op, i, s); err != nil {
				return nil, err
			}
		}
		cfg, count, err := s.Program.checkDispatch(op, i, stepBufs[i], &s.Config)
		if err != nil {
			return nil, err
		}
		plans[i].cfg, counts[i] = cfg, count
		lay.stepStarts[i] = n
		n += len(stepBufs[i])
		nArgs += s.Program.args
		timing = timing || s.Config.Timing
	}
	lay.reads = n
	n += len(batch.Reads)

	bufs := make([]Buffer, 0, n)
	bufs = append(bufs, batch.Clears...)
	for _, f := range batch.Fills {
		bufs = append(bufs, f.Buf)
	}
	for _, u := range batch.Uploads {
		bufs = append(bufs, u.Buf)
	}
	for _, sb := range stepBufs {
		bufs = append(bufs, sb...)
	}
	for _, r := range batch.Reads {
		bufs = append(bufs, r.Buf)
	}
	ents, err := b.pinEntries(op, bufs, lay.label)
	if err != nil {
		return nil, err
	}
	owned := false
	defer func() {
		if !owned {
			b.unpinEntries(op, ents)
		}
	}()

	// Ranges and addresses.
	ups := make([]fusion.UploadCopy, 0, len(batch.Uploads))
	for i, u := range batch.Uploads {
		e := ents[lay.uploads+i]
		label := lay.label(lay.uploads + i)
		if _, err := accounting.RangeEnd(u.Offset, len(u.Data), u.Buf.Len); err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: %d bytes at offset %d do not fit its %d bytes", label, u.Buf.ID, len(u.Data), u.Offset, u.Buf.Len),
				Fix:    "keep offset+len(data) within the buffer's length", Err: err}
		}
		if len(u.Data) == 0 {
			continue
		}
		dst, err := accounting.AddPtr(e.ptr, u.Offset)
		if err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", label, u.Buf.ID, u.Offset),
				Fix:    "pass an offset inside the buffer", Err: err}
		}
		ups = append(ups, fusion.UploadCopy{Handle: u.Buf.ID, Dst: dst, Data: u.Data})
	}
	reqs := make([]fusion.ReadbackCopy, len(batch.Reads))
	var rd *gathered
	nonEmptyReads := 0
	if len(batch.Reads) > 0 {
		rd = &gathered{lens: make([]int, len(batch.Reads))}
	}
	for i, r := range batch.Reads {
		e := ents[lay.reads+i]
		label := lay.label(lay.reads + i)
		if _, err := accounting.RangeEnd(r.Offset, r.Len, r.Buf.Len); err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: range of %d bytes at offset %d does not fit its %d bytes", label, r.Buf.ID, r.Len, r.Offset, r.Buf.Len),
				Fix:    "keep offset+length within the buffer's length", Err: err}
		}
		rd.lens[i] = r.Len
		reqs[i] = fusion.ReadbackCopy{Handle: r.Buf.ID}
		if r.Len == 0 {
			continue
		}
		src, err := accounting.AddPtr(e.ptr, r.Offset)
		if err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", label, r.Buf.ID, r.Offset),
				Fix:    "pass an offset inside the buffer", Err: err}
		}
		reqs[i].Src, reqs[i].Len = src, r.Len
		nonEmptyReads++
	}
	fusedUps, upBytes, err := fusion.FuseUploads(ups)
	if err != nil {
		return nil, &Error{Op: op, Kind: KindInvalidArgument, Detail: "fusing the uploads failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	var fusedRds fusion.FusedReadbacks
	if nonEmptyReads > 0 {
		if fusedRds, err = fusion.FuseReadbacks(reqs); err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument, Detail: "fusing the reads failed",
				Fix: "split the batch; its addresses or lengths overflow", Err: err}
		}
	}
	if upBytes > math.MaxInt || fusedRds.Bytes > math.MaxInt {
		return nil, newError(op, KindInvalidArgument,
			fmt.Sprintf("%d upload bytes and %d read bytes; each must fit one staging block", upBytes, fusedRds.Bytes),
			"split the batch into smaller ones")
	}

	// Kernel parameters and functions (loading modules on first use).
	args := make([]KernelArg, nArgs)
	var last *Program
	var f Function
	for i := range batch.Steps {
		s := &batch.Steps[i]
		if s.Program != last { // sequences usually repeat one program; skip the cache lock
			if f, err = b.function(op, s.Program); err != nil {
				return nil, err
			}
			last = s.Program
		}
		a := args[:s.Program.args:s.Program.args]
		args = args[s.Program.args:]
		if s.Program.typed() {
			fillTyped(a, s.Config.Args, ents[lay.stepStarts[i]:])
			plans[i].fn, plans[i].args = f, a
			continue
		}
		for k := range s.Bufs {
			a[k] = KernelArg{Ptr: ents[lay.stepStarts[i]+k].ptr, IsPtr: true}
		}
		k := len(s.Bufs)
		if s.Program.spec.Count {
			a[k] = KernelArg{U32: counts[i]}
			k++
		}
		for _, v := range s.Config.Scalars {
			a[k] = KernelArg{U32: v}
			k++
		}
		plans[i].fn, plans[i].args = f, a
	}

	p := &Pending{b: b, op: op, up: newStaging(b.hostPool), rd: rd, nReads: len(batch.Reads), timing: timing}
	work := len(batch.Clears) + len(batch.Fills) + len(fusedUps) + len(plans) + nonEmptyReads
	if work == 0 {
		// Nothing reaches the device: the marks drop now and the reads (all
		// empty) wait for AwaitInto.
		p.state = pendingSettled
		if rd == nil {
			p.state = pendingCollected
		}
		return p, nil
	}

	// Staging.
	release := func() {
		p.up.release()
		if rd != nil {
			rd.release()
		}
	}
	var upStage []byte
	if upBytes > 0 {
		if upStage, err = p.up.take(op, int(upBytes)); err != nil {
			return nil, err
		}
		off := 0
		for _, c := range fusedUps {
			off += copy(upStage[off:], c.Data)
		}
	}
	if nonEmptyReads > 0 {
		rd.views = fusedRds.Views
		rd.offs = make([]int, len(fusedRds.Copies))
		off := 0
		for i, c := range fusedRds.Copies {
			rd.offs[i] = off
			off += c.Len
		}
		rd.st, rd.staged = newStaging(b.hostPool), true
		if rd.stage, err = rd.st.take(op, int(fusedRds.Bytes)); err != nil {
			release()
			return nil, err
		}
	}
	lease, err := b.lease(op, timing)
	if err != nil {
		release()
		return nil, err
	}

	// Queue everything; a driver failure drains what was queued so no copy
	// still uses the staging, then releases it all (or, when the drain
	// fails, quarantines it).
	drain := func() {
		h := held{st: []*staging{&p.up}, ents: ents}
		if rd != nil {
			h.st = append(h.st, &rd.st)
		}
		b.drain(op, h, lease)
	}
	fail := func(call string, err error) (*Pending, error) {
		drain()
		release()
		return nil, driverError(op, call, err)
	}
	s := lease.Stream
	for i, h := range batch.Clears {
		if err := b.drv.MemsetD8Async(ents[i].ptr, 0, uint64(h.Len), s); err != nil {
			return fail("MemsetD8Async", err)
		}
	}
	for i, f := range batch.Fills {
		if err := b.drv.MemsetD8Async(ents[lay.fills+i].ptr, f.Value, uint64(f.Buf.Len), s); err != nil {
			return fail("MemsetD8Async", err)
		}
	}
	off := 0
	for _, c := range fusedUps {
		end := off + len(c.Data)
		if err := b.drv.MemcpyHtoDAsync(c.Dst, upStage[off:end:end], s); err != nil {
			return fail("MemcpyHtoDAsync", err)
		}
		off = end
	}
	if timing {
		if err := b.drv.EventRecord(lease.Start, s); err != nil {
			return fail("EventRecord", err)
		}
	}
	if i, err := b.launchPlans(s, plans); err != nil {
		e := driverError(op, "Launch", err)
		e.Detail = fmt.Sprintf("step %d (program %q): %s", i, batch.Steps[i].Program.spec.Name, e.Detail)
		drain()
		release()
		return nil, e
	}
	if timing {
		if err := b.drv.EventRecord(lease.End, s); err != nil {
			return fail("EventRecord", err)
		}
	}
	for i, c := range fusedRds.Copies {
		end := rd.offs[i] + c.Len
		if err := b.drv.MemcpyDtoHAsync(rd.stage[rd.offs[i]:end:end], c.Src, s); err != nil {
			return fail("MemcpyDtoHAsync", err)
		}
	}
	if err := b.drv.EventRecord(lease.Done, s); err != nil {
		return fail("EventRecord", err)
	}

	owned = true
	p.lease, p.ents = lease, ents
	b.tel.memsetOps.Add(uint64(len(batch.Clears) + len(batch.Fills)))
	b.tel.kernelLaunches.Add(uint64(len(plans)))
	if upBytes > 0 {
		b.tel.h2dBytes.Add(upBytes)
		b.tel.uploadOps.Add(1)
	}
	if nonEmptyReads > 0 {
		b.tel.d2hBytes.Add(fusedRds.Bytes)
		b.tel.readbackOps.Add(1)
	}
	b.tel.requested.Add(uint64(len(ups) + nonEmptyReads))
	b.tel.deviceCopies.Add(uint64(len(fusedUps) + len(fusedRds.Copies)))
	return p, nil
}
