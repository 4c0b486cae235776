package proptest

// Static upload cache steps of the core.Backend state machine:
// AcquireStaticUploads and ReleaseStaticUploads on the OptimizerDispatcher,
// and what a failed acquisition leaves retired.

import (
	"bytes"
	"fmt"
	"maps"
	"math/bits"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// staticCatalog is the payloads static acquisitions draw from, few enough
// that the same content is acquired again while cached.
var staticCatalog = [...]struct{ seed, n int }{{1, 64}, {2, 256}, {3, 1024}, {4, 4096}, {5, 16384}, {6, 256},
	{7, 64}, {71, 128}, {7, 128}, {135, 64}} // the last four: [6 7] and [8 9] hold the same bytes, split apart differently

// staticAcquireStep is AcquireStaticUploads of catalog payloads in a domain.
type staticAcquireStep struct {
	withFault
	domain  uint64
	payload []int // catalog indices; -1 is an empty payload
}

// drawStaticAcquire draws a domain and up to three catalog payloads, now and
// then none or an empty one.
func drawStaticAcquire(src entropy) *staticAcquireStep {
	s := &staticAcquireStep{domain: uint64(src.intn(2))}
	n := 1 + src.intn(3)
	if chance(src, 3) {
		n = 0
	}
	for range n {
		p := src.intn(len(staticCatalog))
		if chance(src, 3) {
			p = -1
		}
		s.payload = append(s.payload, p)
	}
	return s
}

func (s *staticAcquireStep) setFault(f *faultSpec) { s.f = f }
func (s *staticAcquireStep) String() string {
	return fmt.Sprintf("staticAcquire(domain=%d payloads=%v)%s", s.domain, s.payload, s.faultString())
}

func (s *staticAcquireStep) run(r *runner) error {
	const call = "AcquireStaticUploads"
	o, err := r.optimizer()
	if err != nil {
		return err
	}
	payloads, total, want := s.payloads()
	key := fmt.Sprint(s.domain, s.payload)
	var held *optSet // an acquisition of the same content that the cache holds now
	for _, st := range o.sets {
		if !st.released && st.set.Cached && st.key == key {
			held = st
		}
	}
	r.logf("optimizer %s(%s) held=%v", call, key, held != nil)
	telBefore := r.b.Telemetry()
	set, err := o.d.AcquireStaticUploads(s.domain, payloads)
	out, verr := r.judge(call, err, want)
	if verr != nil || out != succeeded {
		switch {
		case verr == nil && out == rejected:
			return r.noCalls(call + " rejected")
		case verr == nil && out == faulted:
			return s.checkFaulted(r, o, call, telBefore)
		}
		return verr
	}
	if err := s.checkSet(r, call, set, payloads, held); err != nil {
		return err
	}
	o.sets = append(o.sets, &optSet{set: set, key: key, bytes: total})
	if set.CacheHit {
		// The warm path uploads nothing and waits for nothing.
		return r.noCalls(call + " warm")
	}
	// The cold path uploads every payload exactly once, with one fence.
	t := &r.m.tel
	for _, n := range s.payload {
		if !o.take(staticCatalog[n].n) {
			t.ResidentAllocationBytes += uint64(staticCatalog[n].n)
		}
	}
	t.HostToDeviceBytes += total
	t.UploadOps++
	t.SyncPoints++
	t.RequestedCopies += uint64(len(payloads))
	t.DeviceCopies += uint64(len(payloads))
	return r.expectTransfer(call+" cold", map[sim.Op]uint64{sim.OpMemcpyHtoDAsync: uint64(len(payloads)), sim.OpStreamSynchronize: 1})
}

// payloads builds the step's payloads from the catalog and returns them with
// their total bytes and the model's verdict: InvalidArgument when there is
// no payload or an empty one.
func (s *staticAcquireStep) payloads() ([][]byte, uint64, core.Kind) {
	payloads := make([][]byte, len(s.payload))
	var want core.Kind
	if len(payloads) == 0 {
		want = core.KindInvalidArgument
	}
	var total uint64
	for i, p := range s.payload {
		if p < 0 {
			payloads[i] = []byte{}
			want = core.KindInvalidArgument
			continue
		}
		payloads[i] = patternData(staticCatalog[p].seed, staticCatalog[p].n)
		total += uint64(staticCatalog[p].n)
	}
	return payloads, total, want
}

// checkFaulted checks and accounts for an acquisition that failed on the
// device: ResidentAllocationBytes grew since telBefore by a prefix of the
// payloads the pool could not serve (unless other goroutines allocate too),
// and the buffers the quarantine kept are retired.
func (s *staticAcquireStep) checkFaulted(r *runner, o *optModel, call string, telBefore core.Telemetry) error {
	// The buffers allocated before the failure were freed again,
	// but ResidentAllocationBytes counts allocations made: it may
	// have grown by the fresh (unpooled) payloads allocated in
	// order before the failure, and by nothing else.
	grew := r.b.Telemetry().ResidentAllocationBytes - telBefore.ResidentAllocationBytes
	pool := maps.Clone(o.pool)
	var prefix uint64
	var fresh []int // sizes of the fresh buffers allocated before the failure
	var took []int  // sizes of the pooled buffers it took
	ok := grew == 0
	for _, p := range s.payload {
		if n := staticCatalog[p].n; pool[n] > 0 {
			pool[n]--
			took = append(took, n)
		} else {
			prefix += uint64(n)
			if prefix <= grew {
				fresh = append(fresh, n)
			}
			ok = ok || grew == prefix
		}
	}
	if !ok && !r.cfg.shared { // shared: other goroutines allocate too
		return fmt.Errorf("failed %s grew ResidentAllocationBytes by %d, not by a prefix of its fresh payloads", call, grew)
	}
	r.m.tel.ResidentAllocationBytes += grew
	return r.retiredByQuarantine(o, call, fresh, took)
}

// checkSet checks a successful acquisition's set: one buffer per
// payload, each of its payload's length and holding its bytes on the
// device, and the very buffers of held (an unreleased acquisition of the
// same content the cache keeps), from the cache, when there is one.
func (s *staticAcquireStep) checkSet(r *runner, call string, set core.StaticSet, payloads [][]byte, held *optSet) error {
	if len(set.Bufs) != len(payloads) {
		return fmt.Errorf("%s returned %d buffers for %d payloads", call, len(set.Bufs), len(payloads))
	}
	for i, h := range set.Bufs {
		if h.Len != len(payloads[i]) {
			return fmt.Errorf("%s buffer %d is %+v, for a payload of %d bytes", call, i, h, len(payloads[i]))
		}
	}
	if held != nil && (!set.CacheHit || fmt.Sprint(set.Bufs) != fmt.Sprint(held.set.Bufs)) {
		return fmt.Errorf("%s of content the cache holds for an unreleased acquisition missed: hit=%v buffers %v, held %v", call, set.CacheHit, set.Bufs, held.set.Bufs)
	}
	for i, b := range set.Bufs {
		ptr, err := r.b.ResidentDevicePtr(b)
		if err != nil {
			return fmt.Errorf("static buffer %d: %v", i, err)
		}
		got, err := r.dev.ReadDevice(ptr, b.Len)
		if err != nil || !bytes.Equal(got, payloads[i]) {
			return fmt.Errorf("static buffer %d does not hold its payload (%v)", i, err)
		}
	}
	return nil
}

// retiredByQuarantine accounts for the buffers a failed static acquisition
// could not give back: when its upload's drain failed too, the quarantine
// holds an in-flight use of each of its buffers, so the dispatcher's
// Free of a fresh one is refused (unless that Free's retry
// of the quarantine synchronized), and a pooled one is not pooled again;
// both are retired until Close. The pooled buffers retired must be exactly
// as many of those it took from the pool as the pool shrank by, with their
// bytes, and the other retired bytes those of exactly as many of its fresh
// buffers.
func (r *runner) retiredByQuarantine(o *optModel, call string, fresh, took []int) error {
	st := o.d.Stats()
	k := st.RetiredBuffers - o.retiredN
	if k == 0 {
		return nil
	}
	pooledN := 0
	for _, c := range o.pool {
		pooledN += c
	}
	if r.cfg.shared {
		// Other goroutines move the Backend's totals this check reads:
		// keep the dispatcher's own counts only.
		o.retiredN = st.RetiredBuffers
		for i := len(took) - 1; i >= 0 && pooledN > st.PooledBuffers; i-- {
			if o.pool[took[i]] > 0 {
				o.pool[took[i]]--
				o.pooledBytes -= uint64(took[i])
				pooledN--
			}
		}
		return nil
	}
	kp := pooledN - st.PooledBuffers
	if kp < 0 || kp > k || st.PooledBytes > o.pooledBytes {
		return fmt.Errorf("failed %s grew the pool: %d buffers (%d bytes), model %d (%d bytes)",
			call, st.PooledBuffers, st.PooledBytes, pooledN, o.pooledBytes)
	}
	dropped := o.pooledBytes - st.PooledBytes
	var gone []int // the pooled sizes retired (unique as a multiset for <= 3 payloads)
	found := false
	for set := range 1 << len(took) {
		var n uint64
		var sizes []int
		for i, t := range took {
			if set>>i&1 == 1 {
				n += uint64(t)
				sizes = append(sizes, t)
			}
		}
		if !found && len(sizes) == kp && n == dropped {
			gone, found = sizes, true
		}
	}
	if !found {
		return fmt.Errorf("failed %s retired %d pooled buffer(s) of %d bytes, not a subset of those it took %v", call, kp, dropped, took)
	}
	kf := k - kp
	want := r.m.residentBytes() + o.live() + st.PooledBytes + st.StaticCachedBytes + o.retiredBytes + dropped
	got := r.b.MemoryStats().Allocated
	ok := false
	for set := range 1 << len(fresh) { // at most three payloads
		var n uint64
		for i, f := range fresh {
			if set>>i&1 == 1 {
				n += uint64(f)
			}
		}
		ok = ok || bits.OnesCount(uint(set)) == kf && got == want+n
	}
	if !ok {
		return fmt.Errorf("failed %s retired %d buffer(s) (%d pooled); resident bytes %d, %d without the fresh ones; fresh payloads %v",
			call, k, kp, got, want, fresh)
	}
	countOutcome(call+" (retired, quarantine held)", faulted)
	for _, n := range gone {
		o.pool[n]--
		if o.pool[n] == 0 {
			delete(o.pool, n)
		}
	}
	o.pooledBytes -= dropped
	o.retiredN += k
	o.retiredBytes += got - want + dropped
	return nil
}

// staticReleaseStep is ReleaseStaticUploads of an acquisition, released
// already or not.
type staticReleaseStep struct{ pick int }

func (s *staticReleaseStep) String() string { return fmt.Sprintf("staticRelease(%d)", s.pick) }

func (s *staticReleaseStep) run(r *runner) error {
	const call = "ReleaseStaticUploads"
	if r.opt == nil || len(r.opt.sets) == 0 {
		return nil
	}
	o := r.opt
	st := o.sets[s.pick%len(o.sets)]
	var want core.Kind
	if st.released {
		want = core.KindUnknownHandle
	}
	err := o.d.ReleaseStaticUploads(st.set)
	out, verr := r.judge(call, err, want)
	if verr == nil && out == faulted {
		// A release that failed freeing a buffer may still have ended
		// the acquisition: the dispatcher's count says whether it did.
		acquired := 0
		for _, x := range o.sets {
			if !x.released {
				acquired++
			}
		}
		if o.d.Stats().StaticSetsAcquired < acquired {
			st.released = true
		}
		return nil
	}
	if verr != nil || out != succeeded {
		if verr == nil && out == rejected {
			return r.noCalls(call + " refused")
		}
		return verr
	}
	st.released = true
	if !st.set.Cached {
		// An uncached set's buffers go back through the free path.
		for _, b := range st.set.Bufs {
			o.put(b.Len)
		}
	}
	return nil
}
