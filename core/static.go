package core

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/vyre-go/vyrecuda/accounting"
)

// staticKeyTag separates static-upload keys from every other use of the
// same hash; bump its version when the key layout changes.
const staticKeyTag = "vyrecuda.optimizer.static-upload.v1\x00"

// staticKey identifies a static upload set by content: SHA-256 over the tag,
// the caller's domain, the device's feature key, the payload count and each
// payload prefixed by its length (so ["ab","c"] and ["a","bc"] differ).
type staticKey [sha256.Size]byte

func staticCacheKey(domain, feature uint64, payloads [][]byte) staticKey {
	h := sha256.New()
	h.Write([]byte(staticKeyTag))
	var w [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(w[:], v)
		h.Write(w[:])
	}
	put(domain)
	put(feature)
	put(uint64(len(payloads)))
	for _, p := range payloads {
		put(uint64(len(p)))
		h.Write(p)
	}
	var k staticKey
	h.Sum(k[:0])
	return k
}

// StaticSet is one acquisition of immutable resident payloads: Bufs holds
// one buffer per payload, in order. Bind them to dispatches and Batch
// steps, and read them with Download, until the set is released. The
// buffers are shared by every acquisition of the same content, so every
// write the Backend can see is refused with ErrOwned (uploads, clears,
// fills, peer copies and collectives into them), and a kernel must only
// read them.
type StaticSet struct {
	// Bufs are the set's buffers, one per payload in order.
	Bufs []Buffer
	// IDs are the handle ids of Bufs, in order.
	//
	// Deprecated: use Bufs; the dispatcher's calls take Buffers.
	IDs []uint64
	// CacheHit reports that the set came from the cache and nothing was
	// uploaded.
	CacheHit bool
	// Cached reports that the cache retains the buffers after release; when
	// false (the set alone exceeds the cache's room), release frees them.
	Cached bool
	token  uint64 // names this acquisition; 0 is never issued
}

// staticEntry is one cached set; refs counts outstanding acquisitions.
type staticEntry struct {
	ids   []uint64
	bufs  []Buffer
	bytes uint64
	refs  int
}

// staticAcq is one outstanding acquisition: of a cached entry, or of buffers
// it owns alone (entry nil).
type staticAcq struct {
	entry *staticEntry
	ids   []uint64
	bufs  []Buffer
}

// staticCache is the dispatcher's content-addressed cache; the dispatcher's
// mu guards it.
type staticCache struct {
	entries map[staticKey]*staticEntry
	bytes   uint64 // sum of entries' bytes
	sets    map[uint64]*staticAcq
	tokens  uint64 // last acquisition token issued
}

func (c *staticCache) init() {
	c.entries = make(map[staticKey]*staticEntry)
	c.sets = make(map[uint64]*staticAcq)
	c.bytes = 0
}

// issue records an acquisition and returns the caller's copy of it.
func (c *staticCache) issue(op string, a *staticAcq) (StaticSet, error) {
	if c.tokens == ^uint64(0) {
		return StaticSet{}, newError(op, KindBudget, "static set tokens are exhausted",
			"build a new optimizer dispatcher")
	}
	c.tokens++
	c.sets[c.tokens] = a
	return StaticSet{
		IDs:    append([]uint64(nil), a.ids...),
		Bufs:   append([]Buffer(nil), a.bufs...),
		Cached: a.entry != nil,
		token:  c.tokens,
	}, nil
}

// AcquireStaticUploads returns resident buffers holding payloads, one per
// payload, from a content-addressed cache keyed by domain, the device's
// feature key and the payloads with their lengths. A warm acquisition takes
// a reference on the cached buffers and uploads nothing. A cold one
// allocates (reusing pooled buffers of exact lengths), uploads each payload
// exactly once with one fence, and caches the set when it fits the cache's
// cap, evicting the largest unreferenced sets first; a set that cannot fit
// is returned uncached and freed on release. Every acquisition must be
// released with ReleaseStaticUploads. Empty payload lists and empty payloads
// are ErrInvalidArgument. On failure nothing is cached, acquired or left
// allocated.
func (d *OptimizerDispatcher) AcquireStaticUploads(domain uint64, payloads [][]byte) (StaticSet, error) {
	const op = "AcquireStaticUploads"
	if d == nil {
		return StaticSet{}, nilDispatcher(op)
	}
	total, err := staticPayloadBytes(op, payloads)
	if err != nil {
		return StaticSet{}, err
	}
	key := staticCacheKey(domain, d.b.DeviceInfo().FeatureKey, payloads)

	d.mu.Lock()
	if err := d.usable(op); err != nil {
		d.mu.Unlock()
		return StaticSet{}, err
	}
	if e := d.static.entries[key]; e != nil {
		defer d.mu.Unlock()
		set, err := d.shareStaticLocked(op, e)
		if err != nil {
			return StaticSet{}, err
		}
		set.CacheHit = true
		return set, nil
	}
	ids, bufs, pooled, err := d.allocStaticLocked(op, payloads)
	d.mu.Unlock()
	if err != nil {
		return StaticSet{}, err
	}

	// The upload runs unlocked; the new buffers are marked busy so Close
	// and eviction leave them alone meanwhile. They become immutable only
	// once their payloads are in.
	upErr := d.b.uploadCall(op, len(bufs), func(i int) (Buffer, int, []byte) { return bufs[i], 0, payloads[i] }, true)
	if upErr == nil {
		d.b.store.markStatic(bufs)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		e := d.ids[id]
		e.busy--
		d.ids[id] = e
	}
	if upErr != nil {
		d.undoStaticLocked(op, ids, bufs, pooled)
		return StaticSet{}, upErr
	}
	return d.keepStaticLocked(op, key, total, ids, bufs, pooled)
}

// staticPayloadBytes checks AcquireStaticUploads' payloads (at least one,
// none empty) and returns their total bytes.
func staticPayloadBytes(op string, payloads [][]byte) (uint64, error) {
	if len(payloads) == 0 {
		return 0, newError(op, KindInvalidArgument, "no payloads", "pass at least one non-empty payload")
	}
	var total uint64
	for i, p := range payloads {
		if len(p) == 0 {
			return 0, newError(op, KindInvalidArgument,
				fmt.Sprintf("payload %d of %d is empty", i, len(payloads)),
				"drop empty payloads; a resident buffer holds at least 1 byte")
		}
		var err error
		if total, err = accounting.AddUint64(total, uint64(len(p))); err != nil {
			return 0, &Error{Op: op, Kind: KindInvalidArgument, Detail: "payload bytes overflow", Err: err,
				Fix: "split the payloads over several sets"}
		}
	}
	return total, nil
}

// shareStaticLocked issues an acquisition of the cached set e and takes a
// reference on it. Callers hold d.mu.
func (d *OptimizerDispatcher) shareStaticLocked(op string, e *staticEntry) (StaticSet, error) {
	set, err := d.static.issue(op, &staticAcq{entry: e, ids: e.ids, bufs: e.bufs})
	if err != nil {
		return StaticSet{}, err
	}
	e.refs++
	return set, nil
}

// keepStaticLocked issues the acquisition of freshly uploaded buffers
// (ids, bufs, total bytes) under key: it shares a set another goroutine
// cached meanwhile (giving the new buffers back), else caches the new set
// when room can be made for it, else returns it uncached. On failure the
// new buffers are given back. Callers hold d.mu.
func (d *OptimizerDispatcher) keepStaticLocked(op string, key staticKey, total uint64, ids []uint64, bufs []Buffer, pooled []bool) (StaticSet, error) {
	if e := d.static.entries[key]; e != nil {
		// Another goroutine cached the same content meanwhile: share its
		// buffers and give ours back.
		set, err := d.shareStaticLocked(op, e)
		d.undoStaticLocked(op, ids, bufs, pooled)
		return set, err
	}
	a := &staticAcq{ids: ids, bufs: bufs}
	var entry *staticEntry
	cached := d.static.bytes
	if d.makeStaticRoomLocked(op, total) {
		var err error
		if cached, err = accounting.AddUint64(d.static.bytes, total); err == nil {
			entry = &staticEntry{ids: ids, bufs: bufs, bytes: total}
			a.entry = entry
		}
	}
	set, err := d.static.issue(op, a)
	if err != nil {
		d.undoStaticLocked(op, ids, bufs, pooled)
		return StaticSet{}, err
	}
	if entry != nil {
		entry.refs = 1
		d.static.entries[key] = entry
		d.static.bytes = cached
	}
	return set, nil
}

// allocStaticLocked takes one buffer per payload and enters them in the id
// table as static and busy; on failure everything taken goes back as it was.
func (d *OptimizerDispatcher) allocStaticLocked(op string, payloads [][]byte) ([]uint64, []Buffer, []bool, error) {
	ids := make([]uint64, 0, len(payloads))
	bufs := make([]Buffer, 0, len(payloads))
	pooled := make([]bool, 0, len(payloads))
	undo := func() {
		for _, id := range ids {
			delete(d.ids, id)
		}
		// Newest first, so pooled buffers return to their lists in order.
		for i := len(bufs) - 1; i >= 0; i-- {
			d.giveBackLocked(op, bufs[i], pooled[i])
		}
	}
	for i, p := range payloads {
		buf, fromPool, err := d.takeLocked(op, len(p))
		if err != nil {
			undo()
			if e, ok := err.(*Error); ok {
				e.Detail = fmt.Sprintf("payload %d of %d: %s", i, len(payloads), e.Detail)
			}
			return nil, nil, nil, err
		}
		bufs, pooled = append(bufs, buf), append(pooled, fromPool)
		ids = append(ids, buf.ID)
		d.ids[buf.ID] = optBuf{buf: buf, static: true, busy: 1}
	}
	return ids, bufs, pooled, nil
}

// undoStaticLocked gives back a cold acquisition's buffers when it fails or
// loses a race: pooled ones through the free path (mu was released during
// the upload, so the pool's cap applies again), fresh ones freed for real,
// so a failed acquisition adds nothing to the pool.
func (d *OptimizerDispatcher) undoStaticLocked(op string, ids []uint64, bufs []Buffer, pooled []bool) {
	for i, id := range ids {
		delete(d.ids, id)
		var err error
		if pooled[i] {
			err = d.putLocked(op, bufs[i])
		} else {
			err = d.b.freeResident(op, bufs[i], true)
		}
		if err != nil {
			d.retire(op, bufs[i], err)
		}
	}
}

// dropStaticLocked removes a set's ids and gives its buffers back through the
// free path (the pool may have changed since they were taken, so its cap
// applies again). A buffer that cannot be freed is retired.
func (d *OptimizerDispatcher) dropStaticLocked(op string, ids []uint64, bufs []Buffer) error {
	var first error
	for i, id := range ids {
		delete(d.ids, id)
		if err := d.putLocked(op, bufs[i]); err != nil {
			d.retire(op, bufs[i], err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// makeStaticRoomLocked evicts unreferenced, idle cached sets, largest first,
// until total more bytes fit the cache's cap. When even evicting all of them
// would not make room it evicts nothing and returns false.
func (d *OptimizerDispatcher) makeStaticRoomLocked(op string, total uint64) bool {
	if total > d.staticCap {
		return false
	}
	room := d.staticCap - total
	if d.static.bytes <= room {
		return true
	}
	type victim struct {
		key staticKey
		e   *staticEntry
	}
	var victims []victim
	var evictable uint64
	for k, e := range d.static.entries {
		if e.refs == 0 && d.entryIdle(e) {
			victims = append(victims, victim{k, e})
			evictable += e.bytes // bounded by static.bytes
		}
	}
	if d.static.bytes-min(evictable, d.static.bytes) > room {
		return false
	}
	sort.Slice(victims, func(i, j int) bool {
		if victims[i].e.bytes != victims[j].e.bytes {
			return victims[i].e.bytes > victims[j].e.bytes
		}
		return victims[i].e.ids[0] < victims[j].e.ids[0]
	})
	for _, v := range victims {
		if d.static.bytes <= room {
			break
		}
		d.evictStaticLocked(op, v.key, v.e)
	}
	return d.static.bytes <= room
}

func (d *OptimizerDispatcher) entryIdle(e *staticEntry) bool {
	for i, id := range e.ids {
		if d.ids[id].busy > 0 || d.b.store.inflightUses(e.bufs[i]) > 0 {
			return false
		}
	}
	return true
}

// evictStaticLocked frees a cached set for real; buffers the Backend refuses
// to free are retired.
func (d *OptimizerDispatcher) evictStaticLocked(op string, key staticKey, e *staticEntry) {
	left, err := accounting.SubUint64(d.static.bytes, e.bytes)
	if err != nil {
		d.b.log.Error("static cache byte accounting out of step; rebuilt from the entries", "op", op, "err", err)
		left = 0
		for k, other := range d.static.entries {
			if k != key {
				left += other.bytes
			}
		}
	}
	delete(d.static.entries, key)
	d.static.bytes = left
	for i, id := range e.ids {
		delete(d.ids, id)
		if err := d.b.freeResident(op, e.bufs[i], true); err != nil {
			d.retire(op, e.bufs[i], err)
		}
	}
}

// ReleaseStaticUploads ends an acquisition. A cached set loses one reference
// and stays cached (evictable once no acquisition holds it); an uncached set's
// buffers are freed through the free pool. Releasing a set twice, or a set
// of another dispatcher, is ErrUnknownHandle; releasing an uncached set whose
// buffers are still in use is ErrInFlight; both change nothing. A driver
// failure while freeing is returned, but the set is released all the same
// and the buffer is retried by Close.
func (d *OptimizerDispatcher) ReleaseStaticUploads(set StaticSet) error {
	const op = "ReleaseStaticUploads"
	if d == nil {
		return nilDispatcher(op)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dispatcherClosed(op)
	}
	a := d.static.sets[set.token]
	if a == nil || len(a.bufs) != len(set.Bufs) || (len(a.bufs) > 0 && a.bufs[0] != set.Bufs[0]) {
		return newError(op, KindUnknownHandle,
			fmt.Sprintf("static set %d (%d buffers) is not an outstanding acquisition of this dispatcher", set.token, len(set.Bufs)),
			"release each set AcquireStaticUploads returned exactly once")
	}
	if a.entry != nil {
		if a.entry.refs <= 0 {
			d.b.log.Error("static cache reference count would have gone below zero; left at zero", "op", op)
		} else {
			a.entry.refs--
		}
		delete(d.static.sets, set.token)
		return nil
	}
	for _, id := range a.ids {
		if err := d.checkIdle(op, d.ids[id]); err != nil {
			return err
		}
	}
	delete(d.static.sets, set.token)
	return d.dropStaticLocked(op, a.ids, a.bufs)
}
