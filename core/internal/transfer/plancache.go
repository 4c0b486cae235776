package transfer

import (
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/xferplan"
)

// Planning a transfer searches every chunking at every goroutine count
// (xferplan.Choose): about 5 us for 1 MiB and 17 us for 16 MiB on a 2-core
// development host, a noticeable share of a call that moves 1 MiB in 50 us.
// Calls repeat the same shapes (a loop uploading one buffer, a batch of
// fixed sizes), so recent plans are remembered in a small direct-mapped
// table shared by every Backend. An entry holds everything the plan
// depends on (the request, the tuning, the model and the parallelism), so
// a hit returns exactly what Choose would; a miss plans and replaces the
// slot's entry.

// planMemoSlots is the number of remembered plans (a power of two).
const planMemoSlots = 64

// planMemoEntry is one remembered plan with the inputs it was chosen for.
type planMemoEntry struct {
	req   xferplan.Request
	tune  xferplan.Tuning
	model *xferplan.Model
	procs int
	plan  xferplan.Plan
}

var planMemo [planMemoSlots]atomic.Pointer[planMemoEntry]

// memoSlot hashes a request to its slot.
func memoSlot(r *xferplan.Request) int {
	h := uint64(r.Bytes)*0x9e3779b97f4a7c15 ^ uint64(r.Copies)*0xc2b2ae3d27d4eb4f ^ uint64(r.PackedBytes)*0x165667b19e3779f9
	h ^= uint64(r.Dir) | boolBit(r.Pinned)<<1 | boolBit(r.Streamable)<<2 | boolBit(r.Drainable)<<3
	h ^= h >> 29
	return int(h & (planMemoSlots - 1))
}

func boolBit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// choosePlan returns xferplan.Choose(r, tune, m, procs), remembered.
func choosePlan(r xferplan.Request, tune xferplan.Tuning, m *xferplan.Model, procs int) xferplan.Plan {
	slot := &planMemo[memoSlot(&r)]
	if e := slot.Load(); e != nil && e.req == r && e.tune == tune && e.model == m && e.procs == procs {
		return e.plan
	}
	p := xferplan.Choose(r, tune, m, procs)
	slot.Store(&planMemoEntry{req: r, tune: tune, model: m, procs: procs, plan: p})
	return p
}
