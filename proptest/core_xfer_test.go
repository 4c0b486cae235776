package proptest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// expectStaged checks a single copy that moved in several DMAs: a staged
// plan, one DMA per chunk, no launch. Under the default tuning a staged
// transfer of the sizes drawn here holds a staging block per chunk, so an
// upload reuses none: it records no event, and fences its one stream once;
// a readback records an event after each DMA and learns from them that its
// chunks landed, with no stream synchronization. Telemetry counts each
// chunk as a device copy; as sync points an upload its fence, a readback
// each chunk it waited for (the caller counted one already).
func (r *runner) expectStaged(call string, got map[sim.Op]uint64, op sim.Op) error {
	dmas := got[op]
	records, syncs := dmas, uint64(0)
	if op == sim.OpMemcpyHtoDAsync {
		records, syncs = 0, 1
	}
	// The call's lease acquisition may first retry a quarantine left by an
	// earlier failed step; those synchronizations are not the plan's.
	r.dropRetries(got, map[sim.Op]uint64{sim.OpEventRecord: records, sim.OpStreamSynchronize: syncs})
	if got[sim.OpEventRecord] != records || got[sim.OpStreamSynchronize] != syncs || got[sim.OpLaunch] != 0 {
		return fmt.Errorf("%s (staged): device calls %v", call, got)
	}
	countOutcome(call+" (staged)", succeeded)
	r.m.tel.DeviceCopies += dmas
	if op == sim.OpMemcpyDtoHAsync {
		r.m.tel.SyncPoints += dmas - 1
	}
	return r.expectTransfer(call+" (staged)", map[sim.Op]uint64{op: dmas, sim.OpEventRecord: records,
		sim.OpEventQuery: got[sim.OpEventQuery], sim.OpStreamSynchronize: syncs, sim.OpLaunch: 0})
}

// The transfer plans (core's planner, package xferplan) under drawn
// tunings: each case draws a tuning that narrows the planner to toy sizes,
// a transfer (single or batched, upload or readback, from ordinary or
// pinned memory, into destinations of exactly the needed capacity) and, half
// the time, one injected driver failure. The contract:
//
//   - without a fault the call succeeds, the device (uploads) or the
//     result (readbacks) holds exactly the bytes, and a destination of
//     exactly the needed capacity is reused, not reallocated;
//   - with a fault the call may fail, with a *core.Error; a failed
//     readback of many buffers leaves every caller slot header as it was,
//     and each slot's bytes either as they were or holding all of its
//     buffer's bytes (a packed readback in parts hands each buffer over as
//     its part lands); a failed single readback into the caller's storage
//     returns that storage unchanged as a slice, and its bytes hold a
//     prefix of the buffer's bytes followed by what was there before (what
//     the staged and direct plans may write before the failure); under
//     WithAtomicReadbacks (drawn a quarter of the time) either leaves every
//     byte as it was;
//   - either way the Backend keeps working (the same call without the fault
//     then succeeds), and Close leaves nothing on the device.
//
// Liveness: over the run every plan kind ran: per-copy, packed in one and
// in several parts (uploads and readbacks), staged at several chunkings,
// direct.

// xferCase is one drawn case.
type xferCase struct {
	tune   xferplan.Tuning
	cache  core.StagingCache // how staging meets the caches: no plan's bytes may depend on it
	atomic bool              // WithAtomicReadbacks: a failed readback changes no byte of the caller's
	op     int               // xferOp*
	lens   []int
	fault  sim.Op
	nth    int
	faulty bool
}

const (
	xferUpload = iota
	xferUploadMany
	xferUploadPinned
	xferInto
	xferIntoPinned
	xferManyInto
	xferRunUploads // Backend.Run or RunAsync of a batch of uploads
	xferRunReads   // Backend.Run or RunAsync of a batch of reads
	xferOps
)

var xferFaultOps = []sim.Op{sim.OpHostAlloc, sim.OpMemAlloc, sim.OpStreamCreate, sim.OpMemcpyHtoDAsync,
	sim.OpMemcpyDtoHAsync, sim.OpLaunch, sim.OpStreamSynchronize, sim.OpModuleLoad, sim.OpEventRecord, sim.OpEventQuery}

func drawXferCase(r *rand.Rand) xferCase {
	c := xferCase{op: r.Intn(xferOps)}
	c.cache = core.StagingCache{CachedUploadStores: r.Intn(2) == 0, Evict: core.ReadbackEvict(r.Intn(3))}
	c.atomic = r.Intn(4) == 0
	chunk := []int64{16, 48, 256, 1000}[r.Intn(4)]
	c.tune = xferplan.Tuning{
		PackMinCopies: []int{-1, 2, 6}[r.Intn(3)],
		StageMin:      []int64{-1, 64, 700}[r.Intn(3)],
		MinChunk:      chunk, MaxChunk: chunk * int64(1+r.Intn(3)),
		Blocks:      1 + r.Intn(3),
		MaxWorkers:  1 + r.Intn(3),
		WorkerBytes: []int64{8, 64, 512}[r.Intn(3)],
		PackParts:   r.Intn(4),
	}
	if r.Intn(4) > 0 {
		// Prefer packing and staging wherever they apply, as the
		// reference model would only from sizes too large for a property.
		c.tune.Only = xferplan.Kinds(xferplan.Packed, xferplan.Staged, xferplan.Direct)
	}
	n := 1
	if c.op == xferUploadMany || c.op == xferManyInto || c.op == xferRunUploads || c.op == xferRunReads {
		n = 1 + r.Intn(12)
		if c.op == xferRunUploads && r.Intn(2) == 0 {
			n = 1 // one large upload: a batch's staged plan
		}
	}
	for range n {
		c.lens = append(c.lens, 1+r.Intn([]int{40, 600, 3000}[r.Intn(3)]))
	}
	if c.op == xferRunUploads && n == 1 && r.Intn(2) == 0 {
		// Large enough to be staged in several chunks.
		c.lens[0], c.tune.StageMin = 700+r.Intn(3000), 64
	}
	if r.Intn(2) == 0 {
		c.faulty, c.fault, c.nth = true, xferFaultOps[r.Intn(len(xferFaultOps))], 1+r.Intn(2)
		switch {
		case c.fault == sim.OpModuleLoad || c.fault == sim.OpLaunch:
			c.nth = 1 // the scatter/gather module loads once per Backend, and launches once per call
		case c.fault == sim.OpMemcpyHtoDAsync && r.Intn(3) == 0:
			c.nth = 3 // a packed upload in three parts sends its table with its third DMA
		}
		if (c.fault == sim.OpEventRecord || c.fault == sim.OpEventQuery) && r.Intn(3) == 0 {
			// A packed readback in parts waits on an event per part: make
			// this one that, so the fault may come after earlier parts
			// were handed to the caller's slots.
			c.op, c.lens = xferManyInto, c.lens[:0]
			for range 4 + r.Intn(8) {
				c.lens = append(c.lens, 1+r.Intn(600))
			}
			c.tune.Only, c.tune.PackMinCopies, c.tune.PackParts = xferplan.Kinds(xferplan.Packed), 2, 2+r.Intn(3)
		} else if c.fault == sim.OpEventRecord || c.fault == sim.OpEventQuery {
			// Staged transfers use events too: make this one staged, in
			// several chunks, through fewer blocks than chunks.
			c.op = []int{xferUpload, xferInto}[r.Intn(2)]
			c.lens = []int{700 + r.Intn(3000)}
			c.tune.Only, c.tune.StageMin = xferplan.Kinds(xferplan.Staged), 64
			c.tune.MinChunk, c.tune.MaxChunk, c.tune.Blocks = 256, 256, 2
		}
		if c.op == xferRunUploads || c.op == xferRunReads {
			drawBatchFault(r, &c)
		}
	}
	return c
}

// batchFaultOps are the operations a batch of transfers calls.
var batchFaultOps = []sim.Op{sim.OpHostAlloc, sim.OpMemAlloc, sim.OpMemcpyHtoDAsync, sim.OpMemcpyDtoHAsync,
	sim.OpLaunch, sim.OpModuleLoad, sim.OpStreamSynchronize}

// drawBatchFault fails the first call of one operation a batch makes: a
// readback's DMA in a batch of reads; a launch, the module load or the
// device staging (a batch of transfers launches only its packed scatter or
// gather) in a packed one.
func drawBatchFault(r *rand.Rand, c *xferCase) {
	c.fault, c.nth = batchFaultOps[r.Intn(len(batchFaultOps))], 1
	switch c.fault {
	case sim.OpMemcpyDtoHAsync:
		c.op = xferRunReads
	case sim.OpLaunch, sim.OpMemAlloc, sim.OpModuleLoad:
		c.tune.PackMinCopies, c.tune.Only = 2, xferplan.Kinds(xferplan.Packed, xferplan.Staged, xferplan.Direct)
		for len(c.lens) < 2 {
			c.lens = append(c.lens, 1+r.Intn(600))
		}
	}
}

// xferToyModel is the reference model with free copy jobs, so toy copies
// still spread over every goroutine the drawn tuning allows.
var xferToyModel = func() xferplan.Model {
	m := xferplan.Reference()
	m.CopyJob = 0
	return m
}()

// xferSeen counts, per plan kind as the device calls show it, fault-free
// cases that ran it.
type xferSeen struct {
	perCopy, packed1, packedN, packedNRead, staged, stagedChunkings, direct int
	// Batches (Run, RunAsync): packed uploads, packed reads, staged uploads.
	batchPackedUp, batchPackedRd, batchStaged int
	batchFailedBy                             map[sim.Op]int // batches failed by an injected fault, per operation
	failedBy                                  map[sim.Op]int // calls failed by an injected fault, per operation
}

func TestCoreTransferPlansUnderDrawnTunings(t *testing.T) {
	r := rand.New(rand.NewSource(coreSeed(t)))
	seen := xferSeen{failedBy: map[sim.Op]int{}, batchFailedBy: map[sim.Op]int{}}
	chunkings := map[uint64]bool{}
	for i := range 1500 {
		c := drawXferCase(r)
		if err := runXferCase(r, c, &seen, chunkings); err != nil {
			t.Fatalf("case %d %+v: %v", i, c, err)
		}
	}
	seen.stagedChunkings = len(chunkings)
	t.Logf("plans seen: %+v", seen)
	assert.Positive(t, seen.perCopy, "per-copy")
	assert.Positive(t, seen.packed1, "packed in one DMA")
	assert.Positive(t, seen.packedN, "packed in several parts")
	assert.Positive(t, seen.packedNRead, "a readback packed in several parts")
	assert.Positive(t, seen.direct, "direct")
	assert.GreaterOrEqual(t, seen.stagedChunkings, 3, "staged at several chunkings")
	assert.Positive(t, seen.batchPackedUp, "a batch's uploads packed")
	assert.Positive(t, seen.batchPackedRd, "a batch's reads packed")
	assert.Positive(t, seen.batchStaged, "a batch's upload staged")
	for _, op := range []sim.Op{sim.OpHostAlloc, sim.OpMemcpyHtoDAsync, sim.OpMemcpyDtoHAsync, sim.OpLaunch, sim.OpModuleLoad, sim.OpStreamSynchronize} {
		assert.Positive(t, seen.batchFailedBy[op], "a failure of %v failed some batch", op)
	}
	// A MemAlloc failure only sends a packed transfer down the per-copy
	// path, and streams come from a pool warmed by the setup uploads: those
	// two may never fail a call. Every other phase must have.
	for _, op := range xferFaultOps {
		if op != sim.OpMemAlloc && op != sim.OpStreamCreate {
			assert.Positive(t, seen.failedBy[op], "a failure of %v failed some call", op)
		}
	}
}

func runXferCase(r *rand.Rand, c xferCase, seen *xferSeen, chunkings map[uint64]bool) (err error) {
	dev := sim.New(sim.Config{TotalMemory: 64 << 20})
	b, err := core.Open(dev, core.WithPlanTuning(c.tune), core.WithPlanModel(xferToyModel), core.WithStagingCache(c.cache),
		core.WithAtomicReadbacks(c.atomic),
		core.WithLogger(slog.New(&logCounter{})))
	if err != nil {
		return err
	}
	defer func() {
		dev.ClearFaults()
		err = errors.Join(err, b.Close())
		if live := dev.Live(); !live.Zero() {
			err = errors.Join(err, fmt.Errorf("device holds %+v after Close", live))
		}
	}()
	hs := make([]core.Buffer, len(c.lens))
	old := make([][]byte, len(c.lens))
	for i, n := range c.lens {
		if hs[i], err = b.Alloc(n); err != nil {
			return err
		}
		old[i] = randomXferBytes(r, n)
		if err := b.Upload(core.UploadAt{Buf: hs[i], Data: old[i]}); err != nil {
			return err
		}
	}
	var pinned *core.PinnedBuffer
	if c.op == xferUploadPinned || c.op == xferIntoPinned {
		if pinned, err = b.AllocHostPinned(c.lens[0]); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, pinned.Free()) }()
	}
	before := dev.CallCounts()
	if c.faulty {
		code := cudaapi.CUDA_ERROR_UNKNOWN
		if c.fault == sim.OpHostAlloc || c.fault == sim.OpMemAlloc {
			code = cudaapi.CUDA_ERROR_OUT_OF_MEMORY
		}
		dev.FailNth(c.fault, c.nth, code)
	}
	callErr := xferCall(r, b, dev, c, hs, old, pinned)
	if !c.faulty || callErr == nil {
		if callErr != nil {
			return callErr
		}
		if !c.faulty {
			classifyXfer(c, before, dev.CallCounts(), seen, chunkings)
		}
		return nil
	}
	seen.failedBy[c.fault]++
	if c.op == xferRunUploads || c.op == xferRunReads {
		seen.batchFailedBy[c.fault]++
	}
	var ce *core.Error
	if !errors.As(callErr, &ce) {
		return fmt.Errorf("failure is %T, not *core.Error: %v", callErr, callErr)
	}
	// The Backend keeps working: the same call without the fault succeeds.
	dev.ClearFaults()
	return xferCall(r, b, dev, c, hs, old, pinned)
}

// xferCall makes c's call and checks its result, or, when it fails, what
// it left in the caller's outputs.
func xferCall(r *rand.Rand, b *core.Backend, dev *sim.Device, c xferCase, hs []core.Buffer, old [][]byte, pinned *core.PinnedBuffer) error {
	switch c.op {
	case xferUpload, xferUploadMany, xferUploadPinned:
		return xferUploadCall(r, b, dev, c, hs, old, pinned)
	case xferInto, xferIntoPinned:
		return xferDownloadIntoCall(b, c, hs, old, pinned)
	case xferRunUploads, xferRunReads:
		return xferRun(r, b, dev, c, hs, old)
	default: // xferManyInto
		return xferDownloadManyCall(b, c, hs, old)
	}
}

// xferUploadCall uploads random bytes to the first buffer (from pinned
// memory for xferUploadPinned) or to every buffer, checks the device then
// holds them, and records them in old as the buffers' contents.
func xferUploadCall(r *rand.Rand, b *core.Backend, dev *sim.Device, c xferCase, hs []core.Buffer, old [][]byte, pinned *core.PinnedBuffer) error {
	ups := make([]core.UploadAt, len(hs))
	for i, h := range hs {
		ups[i] = core.UploadAt{Buf: h, Data: randomXferBytes(r, h.Len)}
	}
	var err error
	switch c.op {
	case xferUpload:
		err = b.Upload(core.UploadAt{Buf: hs[0], Data: ups[0].Data})
	case xferUploadPinned:
		src := pinned.Bytes()[:hs[0].Len]
		copy(src, ups[0].Data)
		err = b.Upload(core.UploadAt{Buf: hs[0], Data: src})
	default:
		err = b.Upload(ups...)
	}
	if err != nil {
		return err
	}
	for i, h := range hs {
		if got := deviceXferBytes(b, dev, h); !bytes.Equal(got, ups[i].Data) {
			return fmt.Errorf("buffer %d holds other bytes after the upload", i)
		}
		old[i] = ups[i].Data
	}
	return nil
}

// xferDownloadIntoCall downloads the first buffer into a destination of
// exactly its length in capacity (pinned for xferIntoPinned), and checks the
// bytes and that dst was reused; when the Download fails, it checks dst came
// back and holds at most a prefix of the buffer (none under atomic
// readbacks).
func xferDownloadIntoCall(b *core.Backend, c xferCase, hs []core.Buffer, old [][]byte, pinned *core.PinnedBuffer) error {
	dst := make([]byte, 0, hs[0].Len)
	if c.op == xferIntoPinned {
		dst = pinned.Bytes()[:0:hs[0].Len]
	}
	full := dst[:cap(dst)]
	for i := range full {
		full[i] = 0xa5
	}
	prior := bytes.Clone(full)
	out, err := b.Download(hs[0].All(), dst)
	if err != nil {
		if unsafe.SliceData(out) != unsafe.SliceData(dst) || len(out) != len(dst) || cap(out) != cap(dst) {
			return errors.Join(err, errors.New("a failed Download did not return dst"))
		}
		if !prefixThenOld(full, old[0], prior) {
			return errors.Join(err, errors.New("a failed Download left dst holding more than a prefix of the buffer"))
		}
		if c.atomic && !bytes.Equal(full, prior) {
			return errors.Join(err, errors.New("a failed Download under WithAtomicReadbacks changed dst's bytes"))
		}
		return err
	}
	if !bytes.Equal(out, old[0]) {
		return errors.New("Download returned other bytes")
	}
	if unsafe.SliceData(out) != unsafe.SliceData(dst) {
		return errors.New("a destination of exactly the needed capacity was not reused")
	}
	return nil
}

// xferDownloadManyCall downloads every buffer into slots of exactly the
// needed capacity, and checks the bytes and that each slot was reused; when
// DownloadMany fails, it checks each slot holds its whole buffer or what it
// held before (only the latter under atomic readbacks).
func xferDownloadManyCall(b *core.Backend, c xferCase, hs []core.Buffer, old [][]byte) error {
	dst := make([][]byte, len(hs))
	for i, h := range hs {
		dst[i] = make([]byte, 0, h.Len)
	}
	before := snap2(dst)
	out, err := b.DownloadMany(wholeRanges(hs), dst)
	if err != nil {
		if !wholeOrOld(snap2(dst), before, old) || unsafe.SliceData(out) != unsafe.SliceData(dst) {
			return errors.Join(err, errors.New("a failed DownloadMany changed the caller's slots"))
		}
		if c.atomic && !snap2(dst).equal(before) {
			return errors.Join(err, errors.New("a failed DownloadMany under WithAtomicReadbacks changed the caller's slots"))
		}
		return err
	}
	for i := range hs {
		if !bytes.Equal(out[i], old[i]) {
			return fmt.Errorf("slot %d holds other bytes", i)
		}
		if unsafe.SliceData(out[i]) != unsafe.SliceData(dst[i]) {
			return fmt.Errorf("slot %d of exactly the needed capacity was not reused", i)
		}
	}
	return nil
}

// wholeOrOld reports whether a failed DownloadMany left every
// slot header as it was (before) and each slot's bytes either as they were
// or holding all of its buffer's bytes (want): a readback in parts hands
// each buffer to its slot as its part lands.
func wholeOrOld(after, before snapshot, want [][]byte) bool {
	if after.ptr != before.ptr || after.len != before.len || after.cap != before.cap || len(after.elems) != len(before.elems) {
		return false
	}
	for i, a := range after.elems {
		b := before.elems[i]
		if a.ptr != b.ptr || a.len != b.len || a.cap != b.cap {
			return false
		}
		if !bytes.Equal(a.bytes, b.bytes) && !(i < len(want) && bytes.HasPrefix(a.bytes, want[i]) &&
			bytes.Equal(a.bytes[len(want[i]):], b.bytes[len(want[i]):])) {
			return false
		}
	}
	return true
}

// prefixThenOld reports whether got is want[:k] followed by prior[k:] for
// some k.
func prefixThenOld(got, want, prior []byte) bool {
	k := 0
	for k < len(got) && got[k] == want[k] {
		k++
	}
	for ; k >= 0; k-- {
		if bytes.Equal(got[k:], prior[k:]) && bytes.Equal(got[:k], want[:k]) {
			return true
		}
	}
	return false
}

// classifyXfer names the plan a fault-free call took from its device calls.
func classifyXfer(c xferCase, before, after map[sim.Op]uint64, seen *xferSeen, chunkings map[uint64]bool) {
	d := func(op sim.Op) uint64 { return after[op] - before[op] }
	dmas := d(sim.OpMemcpyHtoDAsync) + d(sim.OpMemcpyDtoHAsync)
	if c.op == xferRunUploads || c.op == xferRunReads {
		classifyRun(c, d, seen, chunkings)
		return
	}
	switch {
	case d(sim.OpLaunch) > 0:
		if c.op == xferUploadMany && d(sim.OpMemcpyHtoDAsync) > 2 {
			seen.packedN++
		} else if c.op == xferManyInto && d(sim.OpMemcpyDtoHAsync) > 1 {
			seen.packedNRead++
		} else {
			seen.packed1++
		}
	case (c.op == xferUploadPinned || c.op == xferIntoPinned) && dmas == 1 && d(sim.OpHostAlloc) == 0:
		seen.direct++
	case len(c.lens) == 1 && dmas > 1:
		seen.staged++
		chunkings[dmas] = true
	default:
		seen.perCopy++
	}
}

func randomXferBytes(r *rand.Rand, n int) []byte {
	out := make([]byte, n)
	r.Read(out)
	return out
}

func deviceXferBytes(b *core.Backend, dev *sim.Device, h core.Buffer) []byte {
	ptr, err := b.ResidentDevicePtr(h)
	if err != nil {
		return nil
	}
	got, err := dev.ReadDevice(ptr, h.Len)
	if err != nil {
		return nil
	}
	return got
}

// wholeRanges returns the range of every byte of each buffer, in order.
func wholeRanges(hs []core.Buffer) []core.Range {
	rs := make([]core.Range, len(hs))
	for i, h := range hs {
		rs[i] = h.All()
	}
	return rs
}
