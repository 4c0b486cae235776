package core

import (
	"fmt"
	"sync"

	"github.com/vyre-go/vyrecuda/accounting"
)

// OptimizerOption configures an OptimizerDispatcher in NewOptimizerDispatcher.
type OptimizerOption func(*optimizerConfig)

type optimizerConfig struct {
	poolCap, staticCap       uint64
	poolCapSet, staticCapSet bool
}

// WithOptimizerPoolCap sets the most bytes of freed buffers the dispatcher's
// free pool keeps for reuse (default: 1/32 of device memory). Zero pools
// nothing: every FreeResident frees for real.
func WithOptimizerPoolCap(bytes uint64) OptimizerOption {
	return func(c *optimizerConfig) { c.poolCap, c.poolCapSet = bytes, true }
}

// WithStaticCacheCap sets the most bytes of static upload sets the
// dispatcher's cache retains (default: 1/32 of device memory). Zero caches
// nothing: every acquisition uploads and every release frees.
func WithStaticCacheCap(bytes uint64) OptimizerOption {
	return func(c *optimizerConfig) { c.staticCap, c.staticCapSet = bytes, true }
}

// OptimizerDispatcher is the persistent fast path for a caller that
// allocates, uploads and dispatches against the same resident buffers many
// times: allocate once, upload once, run many sequences, read back at the
// end. It names buffers by uint64 ids instead of Buffer handles, and it owns
// every buffer it hands out.
//
// FreeResident does not free: it returns the buffer to a free list keyed by
// its exact length, so the next AllocResident of that length is a map pop
// instead of a driver allocation. A pooled buffer is never handed out for a
// smaller request: kernels bound to it assume its length is the declared one.
// The pool holds at most its byte cap; when a freed buffer would exceed it,
// the largest pooled sizes are freed for real first, and a buffer larger than
// the whole cap is freed at once. Every AllocResident returns a fresh id,
// also when it reuses a pooled buffer, so an id that was freed stays unknown
// forever and a stale id can never reach someone else's buffer.
//
// Static uploads (AcquireStaticUploads) are immutable payloads kept resident
// across calls in a content-addressed cache; see static.go.
//
// An OptimizerDispatcher is safe for concurrent use. mu guards every field
// below it: the id table, the free pool and its byte count, the static cache
// and the retired list. It is held across the Backend's allocation and free
// calls (so table and Backend never disagree) but never across a transfer,
// a launch or a fence: calls that move bytes resolve their ids under mu,
// mark them busy, and run unlocked; FreeResident and eviction refuse or skip
// busy buffers. Lock order: mu, then the Backend's own locks; the Backend
// never calls back into a dispatcher.
type OptimizerDispatcher struct {
	b         *Backend
	poolCap   uint64
	staticCap uint64

	mu     sync.Mutex
	closed bool
	// ids holds every buffer handed out and not freed: buffers of
	// AllocResident and of static sets (cached or not). Every buffer the
	// dispatcher owns is in exactly one of ids, pool and retired.
	ids map[uint64]optBuf
	// pool holds freed buffers by exact length. A list emptied by a pool hit
	// stays (keeping its capacity, so the hot alloc/free round trip does not
	// allocate) while the map has at most keepEmptyLists keys; eviction
	// prunes empty lists.
	pool        map[int][]Buffer
	pooledBytes uint64 // sum of the lengths in pool
	static      staticCache
	// retired holds buffers that eviction tried and failed to free (a driver
	// failure, or work the caller queued on them directly); Close retries.
	retired []Buffer
}

// optBuf is one id's entry in the table.
type optBuf struct {
	buf    Buffer
	static bool // belongs to a static set: not freeable, not writable by upload
	busy   int  // uses by dispatcher calls running without mu
}

// keepEmptyLists bounds how many lengths keep an empty free list around.
const keepEmptyLists = 64

// OptimizerStats is a snapshot of what an OptimizerDispatcher holds.
type OptimizerStats struct {
	LiveIDs            int    // ids from AllocResident not yet freed
	PooledBuffers      int    // freed buffers kept for reuse
	PooledBytes        uint64 // their bytes
	PoolCap            uint64 // the free pool's byte cap
	StaticEntries      int    // static sets retained by the cache
	StaticCachedBytes  uint64 // their bytes
	StaticCap          uint64 // the static cache's byte cap
	StaticSetsAcquired int    // acquisitions not yet released
	RetiredBuffers     int    // buffers that could not be freed or pooled (a failed free, or held by unfinished Backend work), retried by Close
}

// NewOptimizerDispatcher builds a dispatcher over b. It allocates nothing
// until used. Its pool and static cache caps default to
// accounting.OptimizerPoolBudget of the device's memory (1/32) each.
func NewOptimizerDispatcher(b *Backend, opts ...OptimizerOption) (*OptimizerDispatcher, error) {
	const op = "NewOptimizerDispatcher"
	if b == nil {
		return nil, newError(op, KindInvalidArgument, "backend is nil", "pass a Backend from core.Open")
	}
	if err := b.enter(op); err != nil {
		return nil, err
	}
	b.exit()
	var cfg optimizerConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	budget := accounting.OptimizerPoolBudget(b.DeviceMemoryBytes())
	if !cfg.poolCapSet {
		cfg.poolCap = budget
	}
	if !cfg.staticCapSet {
		cfg.staticCap = budget
	}
	d := &OptimizerDispatcher{
		b: b, poolCap: cfg.poolCap, staticCap: cfg.staticCap,
		ids:  make(map[uint64]optBuf),
		pool: make(map[int][]Buffer),
	}
	d.static.init()
	return d, nil
}

// nilDispatcher reports a call on a nil *OptimizerDispatcher.
func nilDispatcher(op string) *Error {
	return newError(op, KindInvalidArgument, "the optimizer dispatcher is nil",
		"use the dispatcher core.NewOptimizerDispatcher returned, after checking its error")
}

func dispatcherClosed(op string) *Error {
	return newError(op, KindClosed, "the optimizer dispatcher is closed",
		"build a new one with core.NewOptimizerDispatcher")
}

// usable reports ErrClosed for a closed dispatcher or Backend; callers hold mu.
func (d *OptimizerDispatcher) usable(op string) error {
	if d.closed {
		return dispatcherClosed(op)
	}
	// A pool hit touches no Backend call, so ask the Backend directly: ids
	// of a closed Backend must not be handed out.
	if err := d.b.enter(op); err != nil {
		return err
	}
	d.b.exit()
	return nil
}

func unknownID(op, prefix string, id uint64) *Error {
	return newError(op, KindUnknownHandle,
		fmt.Sprintf("%sid %d is not a live id of this optimizer dispatcher", prefix, id),
		"use an id returned by this dispatcher's AllocResident or AcquireStaticUploads and not yet freed or released")
}

// AllocResident returns the id of an n-byte resident buffer: a pooled buffer
// of exactly n bytes when there is one, else a new allocation through the
// Backend (with the Backend's budget checks). The buffer's contents are
// unspecified; clear or upload before reading it.
func (d *OptimizerDispatcher) AllocResident(n int) (uint64, error) {
	const op = "AllocResident"
	if d == nil {
		return 0, nilDispatcher(op)
	}
	if n <= 0 {
		return 0, newError(op, KindInvalidArgument, fmt.Sprintf("requested %d bytes", n), "request at least 1 byte")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(op); err != nil {
		return 0, err
	}
	buf, pooled, err := d.takeLocked(op, n)
	if err != nil {
		return 0, err
	}
	id, err := d.newIDLocked(buf, pooled)
	if err != nil {
		d.giveBackLocked(op, buf, pooled)
		return 0, &Error{Op: op, Kind: KindBudget, Detail: "the process-wide id space is exhausted",
			Fix: "restart the process; ids are never reused", Err: err}
	}
	d.ids[id] = optBuf{buf: buf}
	return id, nil
}

// newIDLocked picks the id for buf: its own Buffer id when freshly
// allocated, a fresh one from the same process-wide counter when reused.
func (d *OptimizerDispatcher) newIDLocked(buf Buffer, pooled bool) (uint64, error) {
	if !pooled {
		return buf.ID, nil
	}
	return handleIDs.Next()
}

// takeLocked pops an exact-length pooled buffer or allocates one.
func (d *OptimizerDispatcher) takeLocked(op string, n int) (buf Buffer, pooled bool, err error) {
	if list := d.pool[n]; len(list) > 0 {
		left, err := accounting.SubUint64(d.pooledBytes, uint64(n))
		if err != nil {
			return Buffer{}, false, accountingError(op, "free pool", err)
		}
		buf = list[len(list)-1]
		if len(list) == 1 && len(d.pool) > keepEmptyLists {
			delete(d.pool, n)
		} else {
			d.pool[n] = list[:len(list)-1]
		}
		d.pooledBytes = left
		d.b.notifyResident(buf, false)
		return buf, true, nil
	}
	buf, err = d.b.allocateResident(op, n, true)
	if err != nil {
		return Buffer{}, false, err
	}
	return buf, false, nil
}

// giveBackLocked undoes takeLocked on a failure path: a pooled buffer goes
// back to its list (restoring the pool exactly, without eviction), a fresh
// one is freed through the Backend.
func (d *OptimizerDispatcher) giveBackLocked(op string, buf Buffer, pooled bool) {
	if pooled {
		// Straight back onto its list: mu was held since it was taken, so
		// this restores the pool exactly, cap and all.
		if next, err := accounting.AddUint64(d.pooledBytes, uint64(buf.Len)); err == nil {
			d.b.notifyResident(buf, true)
			d.pooledBytes = next
			d.pool[buf.Len] = append(d.pool[buf.Len], buf)
			return
		}
	}
	if err := d.b.freeResident(op, buf, true); err != nil {
		d.retire(op, buf, err)
	}
}

// retire keeps a buffer that could not be freed for Close to retry; callers hold mu.
func (d *OptimizerDispatcher) retire(op string, buf Buffer, err error) {
	d.b.log.Error("optimizer dispatcher could not free a buffer; Close retries",
		"op", op, "id", buf.ID, "bytes", buf.Len, "err", err)
	d.retired = append(d.retired, buf)
}

func accountingError(op, what string, err error) *Error {
	return &Error{Op: op, Kind: KindBudget, Detail: what + " byte accounting is out of step", Err: err,
		Fix: "report this as a bug; the dispatcher's accounting no longer matches its tables"}
}

// inflightUses returns how many uses of unfinished Backend work hold h
// (queued through the Backend directly, e.g. RunAsync on a static set's Bufs).
func (b *Backend) inflightUses(h Buffer) int64 {
	b.store.mu.RLock()
	defer b.store.mu.RUnlock()
	if e := b.store.table.get(h.ID); e != nil {
		return b.store.uses(e)
	}
	return 0
}

// FreeResident gives id's buffer back to the free pool for reuse by the
// next AllocResident of the same length, evicting the largest pooled buffers
// first when the pool would exceed its cap; a buffer larger than the cap is
// freed at once. It refuses unknown ids (ErrUnknownHandle), ids of static
// sets (ErrInvalidArgument: release the set instead) and buffers in use by
// a running call or unfinished work (ErrInFlight), changing nothing. The id
// is unknown from then on.
func (d *OptimizerDispatcher) FreeResident(id uint64) error {
	const op = "FreeResident"
	if d == nil {
		return nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(op); err != nil {
		return err
	}
	e, ok := d.ids[id]
	if !ok {
		return unknownID(op, "", id)
	}
	if !d.b.ownedLive(e.buf) {
		// Unreachable while the Backend refuses to free owned buffers; kept
		// so a buffer gone behind the dispatcher's back is never pooled.
		return newError(op, KindUnknownHandle,
			fmt.Sprintf("id %d: its buffer (handle %d) is no longer live in the Backend", id, e.buf.ID),
			"free dispatcher buffers only through the dispatcher")
	}
	if e.static {
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("id %d belongs to a static upload set", id),
			"release the set with ReleaseStaticUploads instead")
	}
	if err := d.checkIdle(op, id, e); err != nil {
		return err
	}
	if err := d.putLocked(op, e.buf); err != nil {
		return err
	}
	delete(d.ids, id)
	return nil
}

// checkIdle refuses a buffer a running call or unfinished work still uses.
func (d *OptimizerDispatcher) checkIdle(op string, id uint64, e optBuf) error {
	if e.busy > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("id %d is used by %d running call(s)", id, e.busy),
			"free it after the calls using it have returned")
	}
	if n := d.idleAfterQuarantine(e.buf); n > 0 {
		return newError(op, KindInFlight,
			fmt.Sprintf("id %d is used by unfinished work (%s)", id, mentions(n)),
			"wait for the pending work using it before freeing it")
	}
	return nil
}

// putLocked pools buf, or frees it when it alone exceeds the cap. It fails,
// changing nothing, when the Backend still holds buf for unfinished work or
// when the real free fails.
func (d *OptimizerDispatcher) putLocked(op string, buf Buffer) error {
	// Work the Backend still holds the buffer for (e.g. a failed transfer's
	// quarantined copy) may write into it: pooling it would hand that memory
	// to the next AllocResident. Callers retire what is refused here.
	if uses := d.b.inflightUses(buf); uses > 0 {
		return &Error{Op: op, Kind: KindInFlight,
			Detail: fmt.Sprintf("buffer %d is used by unfinished Backend work (%s)", buf.ID, mentions(uses)),
			Fix:    "wait for the pending work using it; the dispatcher frees it at Close"}
	}
	n := uint64(buf.Len)
	if n > d.poolCap {
		return d.b.freeResident(op, buf, true)
	}
	// n <= cap, so cap-n cannot wrap; evict until the buffer fits.
	for d.pooledBytes > d.poolCap-n {
		if !d.evictLargestPooledLocked(op) {
			break
		}
	}
	next, err := accounting.AddUint64(d.pooledBytes, n)
	if err != nil || next > d.poolCap {
		// Unreachable while pooledBytes matches the lists; free for real
		// rather than exceed the cap.
		return d.b.freeResident(op, buf, true)
	}
	d.b.notifyResident(buf, true)
	d.pool[buf.Len] = append(d.pool[buf.Len], buf)
	d.pooledBytes = next
	return nil
}

// evictLargestPooledLocked frees one buffer of the largest pooled length;
// false when the pool is empty. A buffer the Backend refuses to free leaves
// the pool's accounting and is retired.
func (d *OptimizerDispatcher) evictLargestPooledLocked(op string) bool {
	largest := 0
	for n, list := range d.pool {
		if len(list) == 0 {
			delete(d.pool, n)
			continue
		}
		largest = max(largest, n)
	}
	if largest == 0 {
		return false
	}
	left, err := accounting.SubUint64(d.pooledBytes, uint64(largest))
	if err != nil {
		// The lists say more bytes than the counter: rebuild it from them.
		d.b.log.Error("optimizer pool byte accounting out of step; rebuilt from the free lists", "op", op, "err", err)
		d.pooledBytes = d.poolListBytes()
		left = d.pooledBytes - uint64(largest)
	}
	list := d.pool[largest]
	buf := list[len(list)-1]
	if len(list) == 1 {
		delete(d.pool, largest)
	} else {
		d.pool[largest] = list[:len(list)-1]
	}
	d.pooledBytes = left
	if err := d.b.freeResident(op, buf, true); err != nil {
		d.retire(op, buf, err)
	}
	return true
}

func (d *OptimizerDispatcher) poolListBytes() uint64 {
	var total uint64
	for n, list := range d.pool {
		total += uint64(n) * uint64(len(list)) // bounded by device memory
	}
	return total
}

// Stats returns a snapshot of what the dispatcher holds.
func (d *OptimizerDispatcher) Stats() OptimizerStats {
	if d == nil {
		return OptimizerStats{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := OptimizerStats{
		PooledBytes: d.pooledBytes, PoolCap: d.poolCap,
		StaticEntries: len(d.static.entries), StaticCachedBytes: d.static.bytes,
		StaticCap: d.staticCap, StaticSetsAcquired: len(d.static.sets),
		RetiredBuffers: len(d.retired),
	}
	for _, list := range d.pool {
		s.PooledBuffers += len(list)
	}
	for _, e := range d.ids {
		if !e.static {
			s.LiveIDs++
		}
	}
	return s
}

// Buffer returns the Backend handle behind id, for passing to the Backend's
// own calls (DispatchResident, RunAsync). The handle stays valid until the
// id is freed or its static set released; the dispatcher cannot see such
// calls, except that FreeResident refuses while they are in flight.
func (d *OptimizerDispatcher) Buffer(id uint64) (Buffer, error) {
	const op = "Buffer"
	if d == nil {
		return Buffer{}, nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return Buffer{}, dispatcherClosed(op)
	}
	e, ok := d.ids[id]
	if !ok {
		return Buffer{}, unknownID(op, "", id)
	}
	return e.buf, nil
}

// holder resolves ids for one call under mu and marks them busy, so the call
// can run unlocked while FreeResident and eviction leave its buffers alone.
type holder struct {
	d    *OptimizerDispatcher
	op   string
	held []uint64
	err  error
}

// hold resolves id (naming it as it in messages); write refuses
// static buffers, which are immutable. After the first error it does
// nothing. Callers hold mu.
func (h *holder) hold(id uint64, write bool, it item) Buffer {
	if h.err != nil {
		return Buffer{}
	}
	e, ok := h.d.ids[id]
	if !ok {
		h.err = unknownID(h.op, it.String(), id)
		return Buffer{}
	}
	if write && e.static {
		h.err = newError(h.op, KindInvalidArgument,
			fmt.Sprintf("%sid %d belongs to a static upload set, whose contents are immutable", it, id),
			"write into a buffer from AllocResident instead")
		return Buffer{}
	}
	e.busy++
	h.d.ids[id] = e
	h.held = append(h.held, id)
	return e.buf
}

// done drops the busy marks; it takes mu itself unless locked is true.
func (h *holder) done(locked bool) {
	if len(h.held) == 0 {
		return
	}
	if !locked {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
	}
	for _, id := range h.held {
		if e, ok := h.d.ids[id]; ok && e.busy > 0 {
			e.busy--
			h.d.ids[id] = e
		}
	}
	h.held = h.held[:0]
}

// begin locks mu, checks the dispatcher is open and returns a holder; the
// caller resolves ids, then calls h.finish to unlock (undoing the marks if
// resolution failed).
func (d *OptimizerDispatcher) begin(op string, n int) (*holder, error) {
	if d == nil {
		return nil, nilDispatcher(op)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, dispatcherClosed(op)
	}
	return &holder{d: d, op: op, held: make([]uint64, 0, n)}, nil
}

// finish unlocks mu after resolution; on a resolution error the marks are
// dropped first and the error returned.
func (h *holder) finish() error {
	if h.err != nil {
		h.done(true)
	}
	h.d.mu.Unlock()
	return h.err
}

// item names one element of a request in messages ("upload 3: ", "step 1
// buffer 2: "); it is formatted only when an error needs it, so resolving a
// large batch builds no strings.
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

// batchLabel is itemLabel that always names items inside a Run.
func batchLabel(what string, n, i int, inBatch bool) item {
	if inBatch {
		return item{what: what, i: i, j: -1}
	}
	return itemLabel(what, n, i)
}

// itemLabel names element i of n; a lone element goes unnamed.
func itemLabel(what string, n, i int) item {
	if n > 1 {
		return item{what: what, i: i, j: -1}
	}
	return item{}
}

func lengthMismatch(op string, it item, id uint64, want, got int) *Error {
	return newError(op, KindInvalidArgument,
		fmt.Sprintf("%sid %d holds %d bytes but %d bytes were given", it, id, want, got),
		"pass data of the buffer's length, or use UploadResidentAtMany for part of it")
}

func rangeError(op string, it item, what string, id uint64, off, n, limit int, err error) *Error {
	return &Error{Op: op, Kind: KindInvalidArgument,
		Detail: fmt.Sprintf("%sid %d: %s of %d bytes at offset %d does not fit its %d bytes", it, id, what, n, off, limit),
		Fix:    "keep offset+length within the buffer's length", Err: err}
}

// OptUpload is a full-buffer upload by id: Data must be exactly the
// buffer's length.
type OptUpload struct {
	ID   uint64
	Data []byte
}

// OptUploadAt uploads Data into the buffer id starting at byte Offset.
type OptUploadAt struct {
	ID     uint64
	Offset int
	Data   []byte
}

// OptRange names Len bytes of buffer ID starting at byte Offset.
type OptRange struct {
	ID          uint64
	Offset, Len int
}

// UploadResident copies data into the whole of id's buffer; len(data) must
// equal its length (ErrInvalidArgument otherwise).
func (d *OptimizerDispatcher) UploadResident(id uint64, data []byte) error {
	return d.uploadMany("UploadResident", []OptUpload{{ID: id, Data: data}})
}

// UploadResidentMany copies each upload into the whole of its buffer with one
// fence for the batch; every item is validated first, and a bad one fails the
// call with nothing written.
func (d *OptimizerDispatcher) UploadResidentMany(ups []OptUpload) error {
	return d.uploadMany("UploadResidentMany", ups)
}

// uploadMany is UploadResidentMany under the caller's op.
func (d *OptimizerDispatcher) uploadMany(op string, ups []OptUpload) error {
	h, err := d.begin(op, len(ups))
	if err != nil {
		return err
	}
	out := make([]Upload, len(ups))
	for i, u := range ups {
		p := itemLabel("upload", len(ups), i)
		buf := h.hold(u.ID, true, p)
		if h.err == nil && len(u.Data) != buf.Len {
			h.err = lengthMismatch(op, p, u.ID, buf.Len, len(u.Data))
		}
		out[i] = Upload{Buf: buf, Data: u.Data}
	}
	if err := h.finish(); err != nil {
		return err
	}
	defer h.done(false)
	return withOp(op, d.b.UploadResidentMany(out))
}

// UploadResidentAtMany performs offset uploads by id with one fence; every
// range is validated first. Where uploads overlap, later ones win.
func (d *OptimizerDispatcher) UploadResidentAtMany(ups []OptUploadAt) error {
	const op = "UploadResidentAtMany"
	h, err := d.begin(op, len(ups))
	if err != nil {
		return err
	}
	out := d.resolveUploadsAt(h, op, ups, false)
	if err := h.finish(); err != nil {
		return err
	}
	defer h.done(false)
	return withOp(op, d.b.UploadResidentAtMany(out))
}

// resolveUploadsAt resolves and range-checks offset uploads; inBatch names
// every item (a Run has other sections), else only items of several.
func (d *OptimizerDispatcher) resolveUploadsAt(h *holder, op string, ups []OptUploadAt, inBatch bool) []UploadAt {
	out := make([]UploadAt, len(ups))
	for i, u := range ups {
		p := batchLabel("upload", len(ups), i, inBatch)
		buf := h.hold(u.ID, true, p)
		if h.err == nil {
			if _, err := accounting.RangeEnd(u.Offset, len(u.Data), buf.Len); err != nil {
				h.err = rangeError(op, p, "upload", u.ID, u.Offset, len(u.Data), buf.Len, err)
			}
		}
		out[i] = UploadAt{Buf: buf, Offset: u.Offset, Data: u.Data}
	}
	return out
}

// resolveRanges resolves and range-checks reads, naming them as
// resolveUploadsAt does.
func (d *OptimizerDispatcher) resolveRanges(h *holder, op string, rs []OptRange, inBatch bool) []Range {
	out := make([]Range, len(rs))
	for i, r := range rs {
		p := batchLabel("read", len(rs), i, inBatch)
		buf := h.hold(r.ID, false, p)
		if h.err == nil {
			if _, err := accounting.RangeEnd(r.Offset, r.Len, buf.Len); err != nil {
				h.err = rangeError(op, p, "read", r.ID, r.Offset, r.Len, buf.Len, err)
			}
		}
		out[i] = Range{Buf: buf, Offset: r.Offset, Len: r.Len}
	}
	return out
}

// ReadResident reads the whole of id's buffer into a new slice.
func (d *OptimizerDispatcher) ReadResident(id uint64) ([]byte, error) {
	out, err := d.readMany("ReadResident", []uint64{id})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ReadResidentMany reads every buffer in ids with one fence, one new slice
// per id in order.
func (d *OptimizerDispatcher) ReadResidentMany(ids []uint64) ([][]byte, error) {
	return d.readMany("ReadResidentMany", ids)
}

// readMany is ReadResidentMany under the caller's op.
func (d *OptimizerDispatcher) readMany(op string, ids []uint64) ([][]byte, error) {
	h, err := d.begin(op, len(ids))
	if err != nil {
		return nil, err
	}
	bufs := make([]Buffer, len(ids))
	for i, id := range ids {
		bufs[i] = h.hold(id, false, itemLabel("read", len(ids), i))
	}
	if err := h.finish(); err != nil {
		return nil, err
	}
	defer h.done(false)
	out, err := d.b.DownloadResidentMany(bufs)
	return out, withOp(op, err)
}

// ReadResidentRanges reads every range with one fence into the slots of dst,
// append-style (slot i reuses dst[i]'s capacity); use the returned slice. On
// failure it returns dst unchanged.
func (d *OptimizerDispatcher) ReadResidentRanges(rs []OptRange, dst [][]byte) ([][]byte, error) {
	const op = "ReadResidentRanges"
	h, err := d.begin(op, len(rs))
	if err != nil {
		return dst, err
	}
	ranges := d.resolveRanges(h, op, rs, false)
	if err := h.finish(); err != nil {
		return dst, err
	}
	defer h.done(false)
	out, err := d.b.DownloadResidentRangesInto(ranges, dst)
	return out, withOp(op, err)
}

// Close frees every buffer the dispatcher owns: live ids, pooled buffers,
// static sets (cached or not, acquired or not) and retired buffers, so the
// Backend's resident bytes return to where they were before the dispatcher
// allocated anything. Ids and static sets are unknown afterwards; later
// calls return ErrClosed. Close refuses with ErrInFlight, changing nothing,
// while a running call or unfinished Backend work uses any of its buffers.
// Acquired static sets do not block it: like Backend.Close with live
// buffers, closing the owner ends every handle it gave out. Frees continue
// past driver failures and the first is returned; a buffer that failed stays
// with the Backend, which frees it when it closes. When the Backend is
// already closed its buffers are gone with it and Close just forgets them.
func (d *OptimizerDispatcher) Close() error {
	const op = "Close"
	if d == nil {
		return nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dispatcherClosed(op)
	}
	for id, e := range d.ids {
		if err := d.checkIdle(op, id, e); err != nil {
			return err
		}
	}
	d.closed = true
	var first error
	free := func(buf Buffer) {
		err := d.b.freeResident(op, buf, true)
		if err != nil && !isKind(err, KindClosed) && first == nil {
			first = err
		}
	}
	for _, e := range d.ids {
		free(e.buf)
	}
	for _, list := range d.pool {
		for _, buf := range list {
			free(buf)
		}
	}
	for _, buf := range d.retired {
		free(buf)
	}
	d.ids, d.pool, d.retired = map[uint64]optBuf{}, map[int][]Buffer{}, nil
	d.pooledBytes = 0
	d.static.init()
	return first
}

func isKind(err error, k Kind) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == k
}

// OptFill sets every byte of buffer ID to Value by device memset.
type OptFill struct {
	ID    uint64
	Value byte
}

// OptStep is one kernel launch of an OptBatch: Program over the buffers IDs
// (in the program's order) with Config. Static set ids may be bound; their
// contents are shared and must only be read.
type OptStep struct {
	Program *Program
	IDs     []uint64
	Config  DispatchConfig
}

// OptBatch is a Batch expressed in ids; see Batch for the order it runs in.
// Clears, fills and uploads write and so refuse static set ids.
type OptBatch struct {
	Clears  []uint64      // zeroed by device memset
	Fills   []OptFill     // set to a byte value by device memset
	Uploads []OptUploadAt // written from host memory
	Steps   []OptStep     // kernel launches, in order
	Reads   []OptRange    // read back after the last step
}

// Run translates batch to a Batch of the ids' buffers and runs it through
// Backend.Run: one stream, one fence, clears and fills by memset (zero
// host-to-device bytes). Read results come back in dst's slots,
// append-style. Every id and range is validated first: an unknown id, a
// write into a static set or a range outside its buffer fails the call with
// nothing queued and dst unchanged.
func (d *OptimizerDispatcher) Run(batch OptBatch, dst [][]byte) ([][]byte, error) {
	const op = "Run"
	bb, h, err := d.resolveBatch(op, &batch)
	if err != nil {
		return dst, err
	}
	defer h.done(false)
	out, err := d.b.Run(bb, dst)
	return out, withOp(op, err)
}

// resolveBatch translates batch to a Batch of the ids' buffers, holding
// every id busy until the caller's h.done. On failure nothing is held.
func (d *OptimizerDispatcher) resolveBatch(op string, batch *OptBatch) (Batch, *holder, error) {
	n := len(batch.Clears) + len(batch.Fills) + len(batch.Uploads) + len(batch.Reads)
	for _, s := range batch.Steps {
		n += len(s.IDs)
	}
	h, err := d.begin(op, n)
	if err != nil {
		return Batch{}, nil, err
	}
	var bb Batch
	if len(batch.Clears) > 0 {
		bb.Clears = make([]Buffer, len(batch.Clears))
		for i, id := range batch.Clears {
			bb.Clears[i] = h.hold(id, true, item{"clear", i, -1})
		}
	}
	if len(batch.Fills) > 0 {
		bb.Fills = make([]Fill, len(batch.Fills))
		for i, f := range batch.Fills {
			bb.Fills[i] = Fill{Buf: h.hold(f.ID, true, item{"fill", i, -1}), Value: f.Value}
		}
	}
	if len(batch.Uploads) > 0 {
		bb.Uploads = d.resolveUploadsAt(h, op, batch.Uploads, true)
	}
	if len(batch.Steps) > 0 {
		bb.Steps = make([]Step, len(batch.Steps))
		for i, s := range batch.Steps {
			bufs := make([]Buffer, len(s.IDs))
			for j, id := range s.IDs {
				bufs[j] = h.hold(id, false, item{"step", i, j})
			}
			bb.Steps[i] = Step{Program: s.Program, Bufs: bufs, Config: s.Config}
		}
	}
	if len(batch.Reads) > 0 {
		bb.Reads = d.resolveRanges(h, op, batch.Reads, true)
	}
	if err := h.finish(); err != nil {
		return Batch{}, nil, err
	}
	return bb, h, nil
}
