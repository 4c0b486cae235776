package proptest

// Readback steps of the core.Backend state machine: the six forms of
// Download and DownloadMany, the caller-owned slots they may fill, and the
// checks that a failed readback left those slots alone.

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// The forms of readback a readStep draws: Download of a whole buffer into
// a new slice or into caller storage, or of a range; DownloadMany of whole
// buffers into new slices or into caller slots, or of ranges into slots.
const (
	readWhole = iota
	readInto
	readRange
	readMany
	readManyInto
	readRangesInto
	numReadAPIs
)

// readCalls names the Backend method each form of readback calls.
var readCalls = [numReadAPIs]string{"Download", "Download", "Download", "DownloadMany", "DownloadMany", "DownloadMany"}

// dstSpec describes caller-owned output slots handed to the Into calls.
type dstSpec struct{ slots, spare, capMode, fill int }

// drawDst draws the caller slots for a readback of the given number of items.
func drawDst(src entropy, items int) dstSpec {
	return dstSpec{slots: src.intn(items + 3), spare: src.intn(3), capMode: src.intn(4), fill: src.intn(256)}
}

// slice builds one slot: nil, short, or roomy, with known filler bytes.
func (d dstSpec) slice(i int) []byte {
	mode := d.capMode
	if mode == 3 {
		mode = (i + d.fill) % 3
	}
	switch mode {
	case 0:
		return nil
	case 1:
		s := make([]byte, i%5, 4+i%13)
		return fill(s, byte(d.fill))
	default:
		s := make([]byte, 3, 8192)
		return fill(s, byte(d.fill))
	}
}

// fill sets every byte of s up to its capacity to v and returns s.
func fill(s []byte, v byte) []byte {
	full := s[:cap(s)]
	for i := range full {
		full[i] = v
	}
	return s
}

// slots2 builds the caller's slot list for DownloadMany, with spare
// capacity past its length.
func (d dstSpec) slots2() [][]byte {
	out := make([][]byte, d.slots, d.slots+d.spare)
	full := out[:cap(out)]
	for i := range full {
		full[i] = d.slice(i)
	}
	return out
}

// snapshot is a deep copy of caller-owned output, including the bytes past
// each slice's length within its capacity, so a failed call can be proven to
// have left every byte and header as it was.
type snapshot struct {
	ptr      unsafe.Pointer
	len, cap int
	bytes    []byte
	elems    []snapshot
}

// snap1 snapshots one caller slice.
func snap1(s []byte) snapshot {
	return snapshot{unsafe.Pointer(unsafe.SliceData(s)), len(s), cap(s), bytes.Clone(s[:cap(s)]), nil}
}

// snap2 snapshots a caller's slot list and every slot in it.
func snap2(s [][]byte) snapshot {
	sn := snapshot{ptr: unsafe.Pointer(unsafe.SliceData(s)), len: len(s), cap: cap(s)}
	for _, e := range s[:cap(s)] {
		sn.elems = append(sn.elems, snap1(e))
	}
	return sn
}

// equal reports whether two snapshots have the same headers and bytes.
func (a snapshot) equal(b snapshot) bool {
	if a.ptr != b.ptr || a.len != b.len || a.cap != b.cap || !bytes.Equal(a.bytes, b.bytes) || len(a.elems) != len(b.elems) {
		return false
	}
	for i := range a.elems {
		if !a.elems[i].equal(b.elems[i]) {
			return false
		}
	}
	return true
}

// landedWhole reports whether a failed readback of many ranges (rs) changed nothing
// of the caller's slots (before) but what the documented exception allows:
// a large readback moves in parts and hands each range to its slot as its
// part lands, so a device failure may leave slots reused as storage holding
// all of their range's bytes. Every header stays as it was, and a slot
// either keeps all its bytes or holds its whole range followed by what
// was there before.
func (r *runner) landedWhole(after, before snapshot, rs []core.Range) bool {
	if after.ptr != before.ptr || after.len != before.len || after.cap != before.cap || len(after.elems) != len(before.elems) {
		return false
	}
	for j := range after.elems {
		if !r.slotLanded(after.elems[j], before.elems[j], rs, j) {
			return false
		}
	}
	return true
}

// slotLanded is landedWhole for slot j, whose range is rs[j] if any.
func (r *runner) slotLanded(a, b snapshot, rs []core.Range, j int) bool {
	if a.equal(b) {
		return true
	}
	if j >= len(rs) || a.ptr != b.ptr || a.len != b.len || a.cap != b.cap || rs[j].Len > len(a.bytes) {
		return false
	}
	n := rs[j].Len
	return bytes.Equal(a.bytes[n:], b.bytes[n:]) && r.m.checkBytes(rs[j].Buf.ID, rs[j].Offset, a.bytes[:n]) == nil
}

// readStep reads with one of the six forms of readback.
type readStep struct {
	withFault
	api   int
	picks []int
	ats   []place
	dst   dstSpec
}

// drawRead draws a readStep: a form, its handles and ranges (now and then a
// wide batch for the packed path) and caller slots.
func drawRead(src entropy) *readStep {
	s := &readStep{api: src.intn(numReadAPIs)}
	n := 1
	switch s.api {
	case readMany, readManyInto, readRangesInto:
		n = drawCount(src)
	}
	if s.api == readRangesInto && chance(src, 30) {
		s.picks, s.ats = drawWide(src)
		n = len(s.picks)
	} else {
		s.picks = drawPicks(src, n)
		s.ats = drawPlaces(src, n, true)
	}
	s.dst = drawDst(src, n)
	return s
}

func (s *readStep) setFault(f *faultSpec) { s.f = f }
func (s *readStep) String() string {
	return fmt.Sprintf("read(%d %s picks=%v ats=%v dst=%+v)%s", s.api, readCalls[s.api], s.picks, s.ats, s.dst, s.faultString())
}

func (s *readStep) run(r *runner) error {
	call := readCalls[s.api]
	rs, want := s.ranges(r, call)
	r.allowOOM = len(rs) >= packMinCopies // see doUploads
	r.packable = r.allowOOM
	r.spareable = true
	res, verr := s.read(r, call, rs)
	if verr != nil {
		return verr
	}
	out, verr := r.judge(call, res.err, want)
	if verr != nil {
		return verr
	}
	if out != succeeded {
		return s.checkFailed(r, call, out, res, rs)
	}
	return s.checkRead(r, call, res, rs)
}

// ranges resolves the step's picks and places into the ranges it reads (a
// whole buffer for the forms without ranges) and returns them with the
// model's verdict: UnknownHandle when any handle is not live, else
// InvalidArgument when any range does not fit its buffer.
func (s *readStep) ranges(r *runner, call string) ([]core.Range, core.Kind) {
	rs := make([]core.Range, len(s.picks))
	for i, p := range s.picks {
		h := r.pick(p)
		rs[i] = core.Range{Buf: h, Len: h.Len}
		if s.api == readRange || s.api == readRangesInto {
			rs[i].Offset, rs[i].Len = s.ats[i].resolve(h.Len)
		}
		r.logf("%s item %+v off=%d n=%d", call, h, rs[i].Offset, rs[i].Len)
	}
	var want core.Kind
	for _, x := range rs {
		if !r.m.valid(x.Buf) {
			want = core.KindUnknownHandle
			break
		}
	}
	if want == 0 {
		for _, x := range rs {
			if !rangeOK(x.Offset, x.Len, x.Buf.Len) {
				want = core.KindInvalidArgument
				break
			}
		}
	}
	return rs, want
}

// readCallResult is what one readback call gave back, with what the checks
// of the caller's output slots need.
type readCallResult struct {
	got    [][]byte // one result per range, on success
	err    error
	before snapshot
	after  func() snapshot
	reuse  func() error // capacity reuse of caller slots, on success
	nilOut bool         // the call's result on failure must be nil
}

// read makes the step's form of readback call over rs. It returns a
// violation when a successful DownloadMany into new slices hands back a
// result with capacity past its bytes.
func (s *readStep) read(r *runner, call string, rs []core.Range) (readCallResult, error) {
	var res readCallResult
	switch s.api {
	case readWhole, readRange:
		var out []byte
		if s.api == readWhole {
			out, res.err = r.b.Download(rs[0].Buf.All(), nil)
		} else {
			out, res.err = r.b.Download(rs[0].Buf.Slice(rs[0].Offset, rs[0].Len), nil)
		}
		res.got, res.nilOut = [][]byte{out}, out == nil
	case readInto:
		dst := s.dst.slice(s.dst.fill)
		res.before = snap1(dst)
		var out []byte
		out, res.err = r.b.Download(rs[0].Buf.All(), dst)
		res.got = [][]byte{out}
		res.after = func() snapshot { return snap1(out) }
		res.reuse = func() error { return checkReuse(dst, out, rs[0].Len) }
	case readMany:
		res.got, res.err = r.b.DownloadMany(rs, nil)
		res.nilOut = res.got == nil
		if res.err == nil {
			for i := range res.got {
				if cap(res.got[i]) != len(res.got[i]) {
					return res, fmt.Errorf("%s into new slices: result %d has capacity %d past its %d bytes", call, i, cap(res.got[i]), len(res.got[i]))
				}
			}
		}
	case readManyInto, readRangesInto:
		dst := s.dst.slots2()
		res.before = snap2(dst)
		res.got, res.err = r.b.DownloadMany(rs, dst)
		out := res.got
		res.after = func() snapshot { return snap2(out) }
		res.reuse = func() error { return checkReuse2(dst, out, rs) }
	}
	return res, nil
}

// checkFailed checks a readback that was rejected or faulted: the caller's
// slots are as they were (or hold whole ranges that landed), a call without
// slots returned nil, and a rejected call made no device calls. A faulted
// one marks its buffers as read by failed work.
func (s *readStep) checkFailed(r *runner, call string, out outcome, res readCallResult, rs []core.Range) error {
	if res.after != nil && !res.after().equal(res.before) && !r.landedWhole(res.after(), res.before, rs) {
		return fmt.Errorf("failed %s changed the caller's output slots", call)
	}
	if res.after == nil && !res.nilOut {
		return fmt.Errorf("failed %s returned a non-nil result", call)
	}
	if out == rejected {
		return r.noCalls(call + " rejected")
	}
	for _, x := range rs {
		r.failedTargets(x.Buf.ID, span{}) // read, not written
	}
	return nil
}

// checkRead checks a successful readback: one result per range, each as long
// as its range and holding the bytes the model knows, caller slots with room
// reused, and the telemetry and device calls of the copies it made.
func (s *readStep) checkRead(r *runner, call string, res readCallResult, rs []core.Range) error {
	got := res.got
	if len(got) != len(rs) {
		return fmt.Errorf("%s returned %d results for %d ranges", call, len(got), len(rs))
	}
	byHandle := make(map[uint64][]span)
	nonEmpty := 0
	for i, x := range rs {
		if len(got[i]) != x.Len {
			return fmt.Errorf("%s result %d has %d bytes, want %d", call, i, len(got[i]), x.Len)
		}
		if x.Len == 0 {
			continue
		}
		nonEmpty++
		byHandle[x.Buf.ID] = append(byHandle[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
		if err := r.m.checkBytes(x.Buf.ID, x.Offset, got[i]); err != nil {
			return fmt.Errorf("%s result %d: %w", call, i, err)
		}
	}
	if res.reuse != nil {
		if err := res.reuse(); err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
	}
	if nonEmpty == 0 {
		return r.noCalls(call + " of nothing")
	}
	moved, copies := unionStats(byHandle)
	t := &r.m.tel
	t.DeviceToHostBytes += moved
	t.ReadbackOps++
	t.SyncPoints++
	t.RequestedCopies += uint64(nonEmpty)
	return r.expectPath(call, copies, sim.OpMemcpyDtoHAsync)
}

// checkReuse checks the append-style contract: a caller slot with room for
// the result is reused, not reallocated.
func checkReuse(dst, out []byte, n int) error {
	if n > 0 && cap(dst) >= n && unsafe.SliceData(out) != unsafe.SliceData(dst) {
		return fmt.Errorf("a caller slot of capacity %d was not reused for %d bytes", cap(dst), n)
	}
	return nil
}

// checkReuse2 is checkReuse for DownloadMany: one result per range, the
// slot list reused when it has room for every result, and so each slot.
func checkReuse2(dst, out [][]byte, rs []core.Range) error {
	if len(out) != len(rs) {
		return fmt.Errorf("%d results for %d ranges", len(out), len(rs))
	}
	if len(rs) <= cap(dst) && len(rs) > 0 && unsafe.SliceData(out) != unsafe.SliceData(dst) {
		return fmt.Errorf("caller slots of capacity %d were not reused for %d results", cap(dst), len(rs))
	}
	for i := range min(len(dst), len(rs)) {
		if err := checkReuse(dst[i], out[i], rs[i].Len); err != nil {
			return fmt.Errorf("slot %d: %w", i, err)
		}
	}
	return nil
}
