package core

import (
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/xferplan"
)

// xferplan.Choose tries every part count and worker count of a packed plan
// (and every chunking of a staged one) under the cost model: for 1024
// copies on 16 workers that is 1024 model evaluations, 33 us of the 320 us
// a 1024 x 4 KiB upload took on the reference H100 host. Choose is a pure
// function of its arguments, and a program tends to repeat the same
// transfer shapes, so its answers are kept in a small table: a repeated
// shape costs one hash and one comparison.

// planKey is everything Choose's answer depends on.
type planKey struct {
	req   xferplan.Request
	tune  xferplan.Tuning
	model *xferplan.Model // the Backend's model; a replaced model is a new pointer
	procs int
}

type planEntry struct {
	key  planKey
	plan xferplan.Plan
}

// planSlots is the size of the table (a power of two); a shape evicts the
// one whose hash shares its slot.
const planSlots = 256

// planCache is shared by every Backend; entries are immutable once stored.
var planCache [planSlots]atomic.Pointer[planEntry]

// slot hashes k into the table.
func (k *planKey) slot() int {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
	}
	r := &k.req
	mix(uint64(r.Dir)<<1 | uint64(b2u(r.Pinned)) | uint64(b2u(r.Streamable))<<2)
	mix(uint64(r.Copies))
	mix(uint64(r.Bytes))
	mix(uint64(r.PackedBytes))
	mix(uint64(k.tune.MaxWorkers) ^ uint64(k.tune.PackParts)<<20 ^ uint64(k.tune.Only)<<40)
	mix(uint64(k.procs))
	return int(h>>32) & (planSlots - 1)
}

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// cachedChoose returns xferplan.Choose(r, tune, m, procs), from the table
// when the same question was asked before.
func cachedChoose(r xferplan.Request, tune xferplan.Tuning, m *xferplan.Model, procs int) xferplan.Plan {
	k := planKey{req: r, tune: tune, model: m, procs: procs}
	s := &planCache[k.slot()]
	if e := s.Load(); e != nil && e.key == k {
		return e.plan
	}
	p := xferplan.Choose(r, tune, m, procs)
	s.Store(&planEntry{key: k, plan: p})
	return p
}
