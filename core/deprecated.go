package core

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// The names below are the vocabulary before Alloc, Free, Upload, Download,
// DownloadMany, Dispatch and the OptimizerDispatcher's Buffers. Each is a
// thin wrapper over the verb that replaced it and has its checks, results
// and errors, except that an error reports the name the caller called as
// its Op. They stay for one tagged release.

// Upload is one full-buffer upload: Data must be exactly Buf.Len bytes.
//
// Deprecated: use UploadAt (Offset 0) with Backend.Upload.
type Upload struct {
	Buf  Buffer
	Data []byte
}

// AllocateResident allocates an n-byte buffer.
//
// Deprecated: use Alloc.
func (b *Backend) AllocateResident(n int) (Buffer, error) {
	return b.allocateResident("AllocateResident", n, false)
}

// FreeResident frees a buffer from AllocateResident.
//
// Deprecated: use Free.
func (b *Backend) FreeResident(h Buffer) error { return b.freeResident("FreeResident", h, false) }

// UploadResident copies data into the whole of h; len(data) must equal h.Len.
//
// Deprecated: use Upload(UploadAt{Buf: h, Data: data}), or UploadSlice, which also requires len(data) == h.Len.
func (b *Backend) UploadResident(h Buffer, data []byte) error {
	return b.uploadCall("UploadResident", 1, func(int) (Buffer, int, []byte) { return h, 0, data }, true)
}

// UploadResidentAt copies data into h starting at byte off.
//
// Deprecated: use Upload(UploadAt{Buf: h, Offset: off, Data: data}).
func (b *Backend) UploadResidentAt(h Buffer, off int, data []byte) error {
	return b.uploadCall("UploadResidentAt", 1, func(int) (Buffer, int, []byte) { return h, off, data }, false)
}

// UploadResidentMany copies each upload's data into the whole of its buffer
// with one fence; each Data must be exactly its buffer's length.
//
// Deprecated: use Upload with one UploadAt per buffer.
func (b *Backend) UploadResidentMany(ups []Upload) error {
	return b.uploadCall("UploadResidentMany", len(ups), func(i int) (Buffer, int, []byte) { return ups[i].Buf, 0, ups[i].Data }, true)
}

// UploadResidentAtMany performs several offset uploads with one fence.
//
// Deprecated: use Upload(ups...).
func (b *Backend) UploadResidentAtMany(ups []UploadAt) error {
	return b.uploadCall("UploadResidentAtMany", len(ups), func(i int) (Buffer, int, []byte) { return ups[i].Buf, ups[i].Offset, ups[i].Data }, false)
}

// UploadResidentAsyncAt queues a copy of n bytes of pinned memory from src
// into h at byte off; SynchronizeUploads waits for it.
//
// Deprecated: use UploadAsync(UploadAt{Buf: h, Offset: off, Data: pinned[:n]}).
func (b *Backend) UploadResidentAsyncAt(h Buffer, off int, src unsafe.Pointer, n int) error {
	const op = "UploadResidentAsyncAt"
	data, err := pinnedSource(b, op, src, n)
	if err != nil {
		return err
	}
	return withOp(op, b.UploadAsync(UploadAt{Buf: h, Offset: off, Data: data}))
}

// pinnedSource returns the n bytes at src for UploadResidentAsyncAt. It
// refuses a negative n, a nil src and bytes outside memory pinned through
// b before making a slice of them, so that no slice spans memory the caller
// does not own.
func pinnedSource(b *Backend, op string, src unsafe.Pointer, n int) ([]byte, error) {
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	switch {
	case n < 0:
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("length %d bytes", n), "pass a non-negative length")
	case n == 0:
		return nil, nil
	case src == nil:
		return nil, newError(op, KindInvalidArgument, "source pointer is nil", "pass memory pinned through this Backend")
	}
	reg := b.pinned.Use(uintptr(src), n)
	if reg == nil {
		return nil, newError(op, KindInvalidArgument,
			fmt.Sprintf("source [%#x, +%d) is not inside memory pinned through this Backend", uintptr(src), n),
			"copy from a PinnedBuffer's Bytes or from memory registered with PinHostBuffer, or use Upload")
	}
	b.pinned.Done(reg)
	return unsafe.Slice((*byte)(src), n), nil
}

// DownloadResident reads the whole of h into a new slice.
//
// Deprecated: use Download(h.All(), nil).
func (b *Backend) DownloadResident(h Buffer) ([]byte, error) {
	return b.download("DownloadResident", h.All(), nil)
}

// DownloadResidentInto reads the whole of h into dst's storage, append-style.
//
// Deprecated: use Download(h.All(), dst).
func (b *Backend) DownloadResidentInto(h Buffer, dst []byte) ([]byte, error) {
	return b.download("DownloadResidentInto", h.All(), dst)
}

// DownloadResidentRange reads n bytes of h from byte off into a new slice.
//
// Deprecated: use Download(h.Slice(off, n), nil).
func (b *Backend) DownloadResidentRange(h Buffer, off, n int) ([]byte, error) {
	return b.download("DownloadResidentRange", h.Slice(off, n), nil)
}

// DownloadResidentMany reads every buffer in hs with one fence into new
// slices.
//
// Deprecated: use DownloadMany with h.All() for each buffer and a nil dst.
func (b *Backend) DownloadResidentMany(hs []Buffer) ([][]byte, error) {
	return b.downloadMany("DownloadResidentMany", wholeRanges(hs), nil)
}

// DownloadResidentManyInto reads every buffer in hs with one fence into
// dst's slots, append-style.
//
// Deprecated: use DownloadMany with h.All() for each buffer.
func (b *Backend) DownloadResidentManyInto(hs []Buffer, dst [][]byte) ([][]byte, error) {
	return b.downloadMany("DownloadResidentManyInto", wholeRanges(hs), dst)
}

// DownloadResidentRangesInto reads every range with one fence into dst's
// slots, append-style.
//
// Deprecated: use DownloadMany(rs, dst).
func (b *Backend) DownloadResidentRangesInto(rs []Range, dst [][]byte) ([][]byte, error) {
	return b.downloadMany("DownloadResidentRangesInto", rs, dst)
}

// DownloadResidentBatchesInto reads several batches of ranges with one
// fence: result[i][j] holds batches[i][j], reusing dst's storage at every
// level.
//
// Deprecated: use DownloadMany over the batches' ranges one after another;
// batch i's results are the matching subslice of its result.
func (b *Backend) DownloadResidentBatchesInto(batches [][]Range, dst [][][]byte) ([][][]byte, error) {
	return downloadBatches(b, "DownloadResidentBatchesInto", batches, dst)
}

// DispatchResident launches p over bufs with cfg and waits for it.
//
// Deprecated: use Dispatch.
func (b *Backend) DispatchResident(p *Program, bufs []Buffer, cfg DispatchConfig) error {
	return b.dispatch("DispatchResident", p, bufs, cfg)
}

// DispatchResidentAsync queues a launch of p over bufs with cfg.
//
// Deprecated: use DispatchAsync.
func (b *Backend) DispatchResidentAsync(p *Program, bufs []Buffer, cfg DispatchConfig) (*Pending, error) {
	return b.dispatchAsync("DispatchResidentAsync", p, bufs, cfg)
}

// wholeRanges returns the range of every byte of each buffer.
func wholeRanges(hs []Buffer) []Range {
	rs := make([]Range, len(hs))
	for i, h := range hs {
		rs[i] = h.All()
	}
	return rs
}

// downloadBatches reads nested batches of ranges as one DownloadMany under
// op, reusing dst's storage at every level, append-style.
func downloadBatches(b *Backend, op string, batches [][]Range, dst [][][]byte) ([][][]byte, error) {
	total := 0
	for i, batch := range batches {
		t, err := accounting.AddLen(total, len(batch))
		if err != nil {
			return dst, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("batch %d brings the range count past %d", i, math.MaxInt),
				Fix:    "split the batches", Err: err}
		}
		total = t
	}
	flat := make([]Range, 0, total)
	var slots [][]byte // nil for a nil dst, which asks for new slices
	if dst != nil {
		slots = make([][]byte, total)
	}
	old := dst[:cap(dst)]
	for k, batch := range batches {
		if k < len(old) {
			prev := old[k][:cap(old[k])]
			copy(slots[len(flat):], prev[:min(len(prev), len(batch))])
		}
		flat = append(flat, batch...)
	}
	res, err := b.downloadMany(op, flat, slots)
	if err != nil {
		return dst, err
	}
	out := transfer.GrowSlots(dst, len(batches))
	start := 0
	for k, batch := range batches {
		out[k] = transfer.GrowSlots(out[k], len(batch))
		copy(out[k], res[start:start+len(batch)])
		start += len(batch)
	}
	return out, nil
}

// OptUpload is a full-buffer upload by id: Data must be exactly the
// buffer's length.
//
// Deprecated: use UploadAt with the Buffer from OptimizerDispatcher.Alloc.
type OptUpload struct {
	ID   uint64
	Data []byte
}

// OptUploadAt uploads Data into the buffer id starting at byte Offset.
//
// Deprecated: use UploadAt with the Buffer from OptimizerDispatcher.Alloc.
type OptUploadAt struct {
	ID     uint64
	Offset int
	Data   []byte
}

// OptRange names Len bytes of buffer ID starting at byte Offset.
//
// Deprecated: use Range (Buffer.Slice) with the Buffer from
// OptimizerDispatcher.Alloc.
type OptRange struct {
	ID          uint64
	Offset, Len int
}

// OptFill sets every byte of buffer ID to Value by device memset.
//
// Deprecated: use Fill with the Buffer from OptimizerDispatcher.Alloc.
type OptFill struct {
	ID    uint64
	Value byte
}

// OptStep is one kernel launch of an OptBatch over the buffers IDs.
//
// Deprecated: use Step with Buffers from OptimizerDispatcher.Alloc.
type OptStep struct {
	Program *Program
	IDs     []uint64
	Config  DispatchConfig
}

// OptBatch is a Batch expressed in ids.
//
// Deprecated: use Batch with Buffers from OptimizerDispatcher.Alloc.
type OptBatch struct {
	Clears  []uint64      // zeroed by device memset
	Fills   []OptFill     // set to a byte value by device memset
	Uploads []OptUploadAt // written from host memory
	Steps   []OptStep     // kernel launches, in order
	Reads   []OptRange    // read back after the last step
}

// AllocResident returns the id of an n-byte buffer: its handle's ID.
//
// Deprecated: use Alloc, which returns the Buffer.
func (d *OptimizerDispatcher) AllocResident(n int) (uint64, error) {
	h, err := d.alloc("AllocResident", n)
	return h.ID, err
}

// FreeResident gives id's buffer back to the free pool.
//
// Deprecated: use Free.
func (d *OptimizerDispatcher) FreeResident(id uint64) error {
	return d.free("FreeResident", d.bufferOf(id))
}

// Buffer returns the handle behind id.
//
// Deprecated: Alloc returns the Buffer itself.
func (d *OptimizerDispatcher) Buffer(id uint64) (Buffer, error) {
	bufs, err := d.resolveIDs("Buffer", []idRef{{id: id}})
	if err != nil {
		return Buffer{}, err
	}
	return bufs[0], nil
}

// UploadResident copies data into the whole of id's buffer; len(data) must
// equal its length.
//
// Deprecated: use Backend.Upload, or UploadSlice, with the Buffer from Alloc.
func (d *OptimizerDispatcher) UploadResident(id uint64, data []byte) error {
	return d.uploadIDs("UploadResident", []OptUploadAt{{ID: id, Data: data}}, true)
}

// UploadResidentMany copies each upload into the whole of its buffer with
// one fence.
//
// Deprecated: use Backend.Upload with the Buffers from Alloc.
func (d *OptimizerDispatcher) UploadResidentMany(ups []OptUpload) error {
	at := make([]OptUploadAt, len(ups))
	for i, u := range ups {
		at[i] = OptUploadAt{ID: u.ID, Data: u.Data}
	}
	return d.uploadIDs("UploadResidentMany", at, true)
}

// UploadResidentAtMany performs offset uploads by id with one fence.
//
// Deprecated: use Backend.Upload with the Buffers from Alloc.
func (d *OptimizerDispatcher) UploadResidentAtMany(ups []OptUploadAt) error {
	return d.uploadIDs("UploadResidentAtMany", ups, false)
}

// ReadResident reads the whole of id's buffer into a new slice.
//
// Deprecated: use Backend.Download with the Buffer from Alloc.
func (d *OptimizerDispatcher) ReadResident(id uint64) ([]byte, error) {
	out, err := d.readIDs("ReadResident", []uint64{id}, nil, nil)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ReadResidentMany reads every buffer in ids with one fence into new slices.
//
// Deprecated: use Backend.DownloadMany with the Buffers from Alloc.
func (d *OptimizerDispatcher) ReadResidentMany(ids []uint64) ([][]byte, error) {
	return d.readIDs("ReadResidentMany", ids, nil, nil)
}

// ReadResidentRanges reads every range with one fence into dst's slots,
// append-style.
//
// Deprecated: use Backend.DownloadMany with the Buffers from Alloc.
func (d *OptimizerDispatcher) ReadResidentRanges(rs []OptRange, dst [][]byte) ([][]byte, error) {
	ids := make([]uint64, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return d.readIDs("ReadResidentRanges", ids, rs, dst)
}

// Run runs an OptBatch through Backend.Run.
//
// Deprecated: use Backend.Run with the Buffers from Alloc.
func (d *OptimizerDispatcher) Run(batch OptBatch, dst [][]byte) ([][]byte, error) {
	bb, err := d.resolveBatch("Run", &batch)
	if err != nil {
		return dst, err
	}
	return d.b.Run(bb, dst)
}

// Capture captures an OptBatch like Backend.Capture.
//
// Deprecated: use Backend.Capture with the Buffers from Alloc.
func (d *OptimizerDispatcher) Capture(batch OptBatch) (*Graph, error) {
	bb, err := d.resolveBatch("Capture", &batch)
	if err != nil {
		return nil, err
	}
	return d.b.Capture(bb)
}

// idRef is one id a deprecated call names, with its name in messages.
type idRef struct {
	id uint64
	it item
}

// item names one element of a request in messages ("upload 3: ", "step 1
// buffer 2: "); it is formatted only when an error needs it.
type item struct {
	what string // "" for a lone item, which needs no name
	i, j int    // j < 0: no sub-index
}

func (it item) String() string {
	switch {
	case it.what == "":
		return ""
	case it.j >= 0:
		return fmt.Sprintf("%s %d buffer %d: ", it.what, it.i, it.j)
	}
	return fmt.Sprintf("%s %d: ", it.what, it.i)
}

// itemLabel names element i of n; a lone element goes unnamed.
func itemLabel(what string, n, i int) item {
	if n > 1 {
		return item{what: what, i: i, j: -1}
	}
	return item{}
}

// bufferOf returns id's Buffer, or a Buffer of no bytes when id is not
// live (which Free then refuses).
func (d *OptimizerDispatcher) bufferOf(id uint64) Buffer {
	if d == nil {
		return Buffer{ID: id}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.ids[id]; ok {
		return e.buf
	}
	return Buffer{ID: id}
}

// resolveIDs returns the Buffers behind refs, in order.
func (d *OptimizerDispatcher) resolveIDs(op string, refs []idRef) ([]Buffer, error) {
	if d == nil {
		return nil, nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, dispatcherClosed(op)
	}
	bufs := make([]Buffer, len(refs))
	for i, r := range refs {
		e, ok := d.ids[r.id]
		if !ok {
			return nil, newError(op, KindUnknownHandle,
				fmt.Sprintf("%sid %d is not a live id of this optimizer dispatcher", r.it, r.id),
				"use an id returned by this dispatcher's Alloc or AcquireStaticUploads and not yet freed or released")
		}
		bufs[i] = e.buf
	}
	return bufs, nil
}

// uploadIDs uploads by id under op; whole asks for whole-buffer writes.
func (d *OptimizerDispatcher) uploadIDs(op string, ups []OptUploadAt, whole bool) error {
	refs := make([]idRef, len(ups))
	for i, u := range ups {
		refs[i] = idRef{u.ID, itemLabel("upload", len(ups), i)}
	}
	bufs, err := d.resolveIDs(op, refs)
	if err != nil {
		return err
	}
	return d.b.uploadCall(op, len(ups), func(i int) (Buffer, int, []byte) { return bufs[i], ups[i].Offset, ups[i].Data }, whole)
}

// readIDs reads by id under op: the ranges rs of the buffers ids, or with
// rs nil the whole of each.
func (d *OptimizerDispatcher) readIDs(op string, ids []uint64, rs []OptRange, dst [][]byte) ([][]byte, error) {
	refs := make([]idRef, len(ids))
	for i, id := range ids {
		refs[i] = idRef{id, itemLabel("read", len(ids), i)}
	}
	bufs, err := d.resolveIDs(op, refs)
	if err != nil {
		return dst, err
	}
	ranges := wholeRanges(bufs)
	for i, r := range rs {
		ranges[i] = bufs[i].Slice(r.Offset, r.Len)
	}
	return d.b.downloadMany(op, ranges, dst)
}

// resolveBatch translates an OptBatch to a Batch of the ids' buffers.
func (d *OptimizerDispatcher) resolveBatch(op string, batch *OptBatch) (Batch, error) {
	var refs []idRef
	add := func(what string, i, j int, id uint64) { refs = append(refs, idRef{id, item{what, i, j}}) }
	for i, id := range batch.Clears {
		add("clear", i, -1, id)
	}
	for i, f := range batch.Fills {
		add("fill", i, -1, f.ID)
	}
	for i, u := range batch.Uploads {
		add("upload", i, -1, u.ID)
	}
	for i, s := range batch.Steps {
		for j, id := range s.IDs {
			add("step", i, j, id)
		}
	}
	for i, r := range batch.Reads {
		add("read", i, -1, r.ID)
	}
	bufs, err := d.resolveIDs(op, refs)
	if err != nil {
		return Batch{}, err
	}
	next := func() Buffer { h := bufs[0]; bufs = bufs[1:]; return h }
	var bb Batch
	for range batch.Clears {
		bb.Clears = append(bb.Clears, next())
	}
	for _, f := range batch.Fills {
		bb.Fills = append(bb.Fills, Fill{Buf: next(), Value: f.Value})
	}
	for _, u := range batch.Uploads {
		bb.Uploads = append(bb.Uploads, UploadAt{Buf: next(), Offset: u.Offset, Data: u.Data})
	}
	for _, s := range batch.Steps {
		step := Step{Program: s.Program, Config: s.Config, Bufs: make([]Buffer, len(s.IDs))}
		for j := range s.IDs {
			step.Bufs[j] = next()
		}
		bb.Steps = append(bb.Steps, step)
	}
	for _, r := range batch.Reads {
		bb.Reads = append(bb.Reads, next().Slice(r.Offset, r.Len))
	}
	return bb, nil
}

// DeviceMemoryBytes returns the device's total memory in bytes, as its
// driver reported it when the Backend was opened.
//
// Deprecated: use DeviceInfo().TotalMemory.
func (b *Backend) DeviceMemoryBytes() uint64 { return b.DeviceInfo().TotalMemory }

// ResidentAllocatedBytes returns the bytes held by live resident buffers.
//
// Deprecated: use MemoryStats().Allocated.
func (b *Backend) ResidentAllocatedBytes() uint64 { return b.MemoryStats().Allocated }

// PoolCachedBytes reports the bytes cached by the device pool and the
// pinned host staging pool, after waiting for staging still being evicted.
//
// Deprecated: use MemoryStats().CachedDevice and CachedPinned.
func (b *Backend) PoolCachedBytes() (device, pinnedHost uint64) {
	st := b.MemoryStats()
	return st.CachedDevice, st.CachedPinned
}
