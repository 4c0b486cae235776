package proptest

// OptimizerDispatcher steps of the core.Backend state machine: the model of
// its exact-size pool, and its Alloc and Free.

import (
	"errors"
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
)

// optModel is the model of the current Backend's OptimizerDispatcher, made
// on the first optimizer step. Its sizes are powers of two, so every buffer
// it owns occupies exactly its length on the device whether or not the
// Backend's device pool serves it (which keeps checkGlobal's device-bytes
// check exact), while sizes still differ enough to prove the pool never
// hands a larger buffer to a smaller request.
type optModel struct {
	d           *core.OptimizerDispatcher
	poolCap     uint64
	ids         map[uint64]int // live buffers' handle ids and their lengths
	order       []uint64       // every handle id handed out, for picks
	lens        map[uint64]int // the length of every handle id handed out
	pool        map[int]int    // pooled buffers: length -> count
	pooledBytes uint64
	sets        []*optSet
	// Buffers of failed static acquisitions that the quarantine still
	// used when the dispatcher freed them: retired until its Close.
	retiredN     int
	retiredBytes uint64
	content      *optContent // what batch steps know of the ids' bytes
}

// optSet is one static acquisition.
type optSet struct {
	set      core.StaticSet
	key      string
	bytes    uint64
	released bool
}

// live is the bytes the dispatcher holds for its callers: live buffers and
// the buffers of unreleased acquisitions the static cache does not keep.
func (o *optModel) live() (n uint64) {
	for _, l := range o.ids {
		n += uint64(l)
	}
	for _, s := range o.sets {
		if !s.released && !s.set.Cached {
			n += s.bytes
		}
	}
	return n
}

// put is the documented free path: a buffer larger than the cap is freed at
// once; otherwise the largest pooled buffers are freed, one at a time, until
// it fits, and it joins the pool.
func (o *optModel) put(n int) {
	if uint64(n) > o.poolCap {
		return
	}
	for o.pooledBytes > o.poolCap-uint64(n) {
		largest := 0
		for l, c := range o.pool {
			if c > 0 {
				largest = max(largest, l)
			}
		}
		o.pool[largest]--
		o.pooledBytes -= uint64(largest)
	}
	o.pool[n]++
	o.pooledBytes += uint64(n)
}

// take pops an exact-length pooled buffer and reports whether there was one.
func (o *optModel) take(n int) bool {
	if o.pool[n] == 0 {
		return false
	}
	o.pool[n]--
	o.pooledBytes -= uint64(n)
	return true
}

// optimizer returns the runner's dispatcher model, making the dispatcher on
// first use with caps drawn for the sequence.
func (r *runner) optimizer() (*optModel, error) {
	if r.opt != nil {
		return r.opt, nil
	}
	var opts []core.OptimizerOption
	poolCap := r.cfg.total / 32
	if r.cfg.optPoolCap >= 0 {
		poolCap = uint64(r.cfg.optPoolCap)
		opts = append(opts, core.WithOptimizerPoolCap(poolCap))
	}
	if r.cfg.staticCap >= 0 {
		opts = append(opts, core.WithStaticCacheCap(uint64(r.cfg.staticCap)))
	}
	d, err := core.NewOptimizerDispatcher(r.b, opts...)
	if err != nil {
		return nil, fmt.Errorf("NewOptimizerDispatcher: %v", err)
	}
	r.opt = &optModel{d: d, poolCap: poolCap, ids: make(map[uint64]int), lens: make(map[uint64]int), pool: make(map[int]int)}
	return r.opt, nil
}

// checkOptimizer checks the dispatcher against its model: the exact free
// pool, live ids and acquisitions, the caps, and the Backend's resident
// bytes as the sum of everything the runner and the dispatcher hold.
func (r *runner) checkOptimizer() error {
	o := r.opt
	if o == nil {
		return nil
	}
	st := o.d.Stats()
	var pooled int
	for _, c := range o.pool {
		pooled += c
	}
	acquired := 0
	for _, s := range o.sets {
		if !s.released {
			acquired++
		}
	}
	switch {
	case st.LiveIDs != len(o.ids):
		return fmt.Errorf("optimizer live ids %d, model %d", st.LiveIDs, len(o.ids))
	case st.PooledBuffers != pooled || st.PooledBytes != o.pooledBytes:
		return fmt.Errorf("optimizer pool %d buffers / %d bytes, model %d / %d (%v)", st.PooledBuffers, st.PooledBytes, pooled, o.pooledBytes, o.pool)
	case st.PooledBytes > st.PoolCap || st.StaticCachedBytes > st.StaticCap:
		return fmt.Errorf("optimizer over its caps: %+v", st)
	case st.StaticSetsAcquired != acquired:
		return fmt.Errorf("optimizer acquisitions %d, model %d", st.StaticSetsAcquired, acquired)
	case st.RetiredBuffers != o.retiredN:
		return fmt.Errorf("optimizer retired buffers %d, model %d", st.RetiredBuffers, o.retiredN)
	case st.RetiredBuffers != 0 && r.cfg.faults == faultsOff:
		return fmt.Errorf("optimizer retired buffers without faults: %+v", st)
	}
	want := r.m.residentBytes() + o.live() + st.PooledBytes + st.StaticCachedBytes + o.retiredBytes
	if got := r.b.MemoryStats().Allocated; got != want {
		return fmt.Errorf("MemoryStats.Allocated %d, want %d (runner %d + dispatcher live %d + pooled %d + static cached %d + retired %d)",
			got, want, r.m.residentBytes(), o.live(), st.PooledBytes, st.StaticCachedBytes, o.retiredBytes)
	}
	return nil
}

// drawPow2 draws a power-of-two size up to 64 KiB, now and then an invalid
// one.
func drawPow2(src entropy) int {
	if chance(src, 3) {
		return -src.intn(2)
	}
	return 1 << src.intn(17)
}

// optAllocStep is OptimizerDispatcher.Alloc.
type optAllocStep struct {
	withFault
	size int
}

func (s *optAllocStep) setFault(f *faultSpec) { s.f = f }
func (s *optAllocStep) String() string        { return fmt.Sprintf("optAlloc(%d)%s", s.size, s.faultString()) }

func (s *optAllocStep) run(r *runner) error {
	const call = "Alloc"
	o, err := r.optimizer()
	if err != nil {
		return err
	}
	n := s.size
	left := r.budgetLeft()
	hit := n > 0 && o.pool[n] > 0
	var want core.Kind
	switch {
	case n <= 0:
		want = core.KindInvalidArgument
	case !hit && uint64(n) > left:
		want = core.KindBudget
	}
	r.logf("optimizer %s(%d) pooled=%d left=%d", call, n, o.pool[n], left)
	buf, err := o.d.Alloc(n)
	out, verr := r.judge("opt."+call, err, want)
	if verr != nil || out != succeeded {
		return verr
	}
	id := buf.ID
	if buf.Len != n {
		return fmt.Errorf("%s(%d) returned %+v (a pool must never serve a smaller request with a larger buffer)", call, n, buf)
	}
	for _, old := range o.order {
		if old == id {
			return fmt.Errorf("%s returned handle %d twice", call, id)
		}
	}
	o.ids[id] = n
	o.lens[id] = n
	o.order = append(o.order, id)
	if o.take(n) {
		return r.noCalls(call + " from the pool")
	}
	r.m.tel.ResidentAllocationBytes += uint64(n)
	return r.expectAllocCalls(call)
}

// optFreeStep is OptimizerDispatcher.Free of a live buffer, a freed one, a
// buffer of an acquired static set, or one never handed out.
type optFreeStep struct {
	withFault
	pick int
}

func (s *optFreeStep) setFault(f *faultSpec) { s.f = f }
func (s *optFreeStep) String() string        { return fmt.Sprintf("optFree(%d)%s", s.pick, s.faultString()) }

func (s *optFreeStep) run(r *runner) error {
	const call = "Free"
	o, err := r.optimizer()
	if err != nil {
		return err
	}
	var id uint64 = 1<<62 + uint64(s.pick)
	n := 1 + s.pick%64
	want := core.KindUnknownHandle
	var held []core.Buffer
	for _, st := range o.sets {
		if !st.released {
			held = append(held, st.set.Bufs...)
		}
	}
	switch c := s.pick % 10; {
	case c < 7 && len(o.ids) > 0:
		var live []uint64
		for _, x := range o.order {
			if _, ok := o.ids[x]; ok {
				live = append(live, x)
			}
		}
		id, want = live[s.pick%len(live)], 0
		n = o.ids[id]
	case c < 8 && len(o.order) > 0:
		id = o.order[s.pick%len(o.order)]
		n = o.lens[id]
		if _, ok := o.ids[id]; ok {
			want = 0
		}
	case c < 9 && len(held) > 0:
		h := held[s.pick%len(held)]
		id, n, want = h.ID, h.Len, core.KindInvalidArgument
	}
	r.logf("optimizer %s(%d, %d bytes)", call, id, n)
	err = o.d.Free(core.Buffer{ID: id, Len: n})
	if want == 0 && (r.q.start > 0 || r.cfg.shared) && errors.Is(err, core.ErrInFlight) {
		// Failed transfers of dispatcher buffers leave them to the
		// quarantine, whose retry here may fail to synchronize again.
		return nil
	}
	out, verr := r.judge("opt."+call, err, want)
	if verr != nil || out != succeeded {
		if verr == nil && out == rejected {
			return r.noCalls(call + " refused")
		}
		return verr
	}
	delete(o.ids, id)
	o.put(n)
	if _, err := r.b.Download(core.Buffer{ID: id, Len: n}.Slice(0, 1), nil); !errors.Is(err, core.ErrUnknownHandle) {
		return fmt.Errorf("Download of a freed dispatcher buffer: %v, want ErrUnknownHandle", err)
	}
	return nil
}
