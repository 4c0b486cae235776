package collective_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/collective"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/fakes"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestRunRefusesRanksThatDisagree: ranks whose buffers each fit the
// collective alone but not together (different element counts) are
// refused before any rank is pinned or anything is queued, with every
// rank's count in the message.
func TestRunRefusesRanksThatDisagree(t *testing.T) {
	for _, tc := range []struct {
		args collective.Args
		send [3]int // bytes, 0: no send buffer
		recv [3]int
		want string
	}{
		{collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum}, [3]int{16, 16, 8}, [3]int{16, 16, 8},
			"the ranks' int32 counts differ: rank 0 has 4, rank 1 has 4, rank 2 has 2 elements in send and recv"},
		{collective.Args{Kind: collective.Broadcast, DT: driver.DataInt32, Root: 0}, [3]int{16, 0, 0}, [3]int{16, 12, 16},
			"rank 0 has 4, rank 1 has 3, rank 2 has 4 elements in recv"},
		{collective.Args{Kind: collective.AllGather, DT: driver.DataInt32}, [3]int{8, 4, 8}, [3]int{24, 12, 24},
			"rank 0 has 2, rank 1 has 1, rank 2 has 2 elements in send"},
		{collective.Args{Kind: collective.ReduceScatter, DT: driver.DataInt32, Red: driver.ReduceMax}, [3]int{24, 24, 12}, [3]int{8, 8, 4},
			"rank 0 has 2, rank 1 has 2, rank 2 has 1 elements in recv"},
	} {
		t.Run(tc.args.Kind.String(), func(t *testing.T) {
			r := newRig(t, 3)
			for i := range r.ranks {
				var send []byte
				if tc.send[i] > 0 {
					send = make([]byte, tc.send[i])
				}
				r.buffers(t, i, send, tc.recv[i])
			}
			err := r.run(tc.args)
			e := fakes.RequireErrKind(t, err, errs.ErrInvalidArgument, tc.want)
			assert.Equal(t, "Group."+tc.args.Kind.String(), e.Op)
			assert.Contains(t, e.Fix, "recv = ranks x send for AllGather")
			for i, k := range r.ranks {
				assert.Zero(t, k.pins, "rank %d: nothing pinned", i)
				assert.Zero(t, k.dev.Calls(sim.OpStreamCreate), "rank %d: nothing leased", i)
				assert.Zero(t, k.dev.Calls(sim.OpGroupStart), "rank %d: nothing queued", i)
			}
			assert.Zero(t, r.aborted)
		})
	}
}

func TestDescRoundTrip(t *testing.T) {
	for _, d := range []collective.Desc{
		{Kind: collective.AllReduce, Count: 100, DT: driver.DataFloat32, Red: driver.ReduceSum},
		{Kind: collective.Broadcast, Count: 1 << 40, DT: driver.DataBFloat16, Root: 7},
		{Kind: collective.ReduceScatter, Refused: true},
	} {
		b := make([]byte, collective.DescBytes)
		d.Put(b)
		assert.Equal(t, d, collective.ReadDesc(b))
	}
	a := collective.Args{Kind: collective.Broadcast, DT: driver.DataInt8, Red: driver.ReduceMax, Root: 1, Ranks: 2}
	assert.Equal(t, collective.Desc{Kind: collective.Broadcast, Count: 3, DT: driver.DataInt8, Root: 1}, a.Desc(3, nil),
		"a broadcast carries its root, not a reduction")
	a = collective.Args{Kind: collective.AllReduce, DT: driver.DataInt8, Red: driver.ReduceMax, Root: 1, Ranks: 2}
	assert.Equal(t, collective.Desc{Kind: collective.AllReduce, Count: 3, DT: driver.DataInt8, Red: driver.ReduceMax}, a.Desc(3, nil))
	assert.Equal(t, collective.Desc{Kind: collective.AllReduce, DT: driver.DataInt8, Red: driver.ReduceMax, Refused: true},
		a.Desc(3, errors.New("bad handle")))
}

// TestAgreementNamesEveryRanksCall: equal calls agree; otherwise the error
// lists each distinct call once with the ranks that made it.
func TestAgreementNamesEveryRanksCall(t *testing.T) {
	sum := collective.Desc{Kind: collective.AllReduce, Count: 100, DT: driver.DataFloat32, Red: driver.ReduceSum}
	require.NoError(t, collective.Agreement("Comm.AllReduce", []collective.Desc{sum, sum, sum}))

	half := sum
	half.Count = 50
	err := collective.Agreement("Comm.AllReduce", []collective.Desc{sum, half, sum})
	fakes.RequireErrKind(t, err, errs.ErrInvalidArgument,
		"ranks 0, 2: AllReduce of 100 float32 (sum); rank 1: AllReduce of 50 float32 (sum); nothing was queued",
		"Fix: pass the same collective, data type, reduction and root on every rank")

	bcast := collective.Desc{Kind: collective.Broadcast, Count: 100, DT: driver.DataFloat32, Root: 1}
	err = collective.Agreement("Comm.Broadcast", []collective.Desc{sum, bcast})
	fakes.RequireErrKind(t, err, errs.ErrInvalidArgument, "rank 0: AllReduce of 100 float32 (sum); rank 1: Broadcast of 100 float32 from root 1")

	err = collective.Agreement("Comm.AllReduce", []collective.Desc{sum, {Kind: collective.AllReduce, Refused: true}})
	fakes.RequireErrKind(t, err, errs.ErrInvalidArgument, "rank 1: refused its part", "Fix: fix the call of the rank that refused its part")
}

// TestRunAgree: Agree runs once before anything is queued, with the count
// on success and with the local failure otherwise; its refusal gives
// everything back and queues nothing.
func TestRunAgree(t *testing.T) {
	r := newRig(t, 1)
	r.buffers(t, 0, i32s(1, 2, 3), 12)
	parts := r.parts()
	a := collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum, Ranks: 1}
	var counts []uint64
	var locals []error
	refuse := errs.New("Comm.AllReduce", errs.KindInvalidArgument, "the ranks' calls differ", "x")
	call := &collective.Call{Op: "Comm.AllReduce", Args: a, Parts: parts, Abort: r.abort, Agree: func(count uint64, local error) error {
		counts, locals = append(counts, count), append(locals, local)
		if k := r.ranks[0]; local == nil {
			assert.Equal(t, k.unpins+1, k.pins, "called with the part pinned")
			assert.Equal(t, 1, k.pool.Counts().Leases, "and leased")
		}
		return refuse
	}}
	assert.Same(t, refuse, collective.Run(t.Context(), call))
	assert.Equal(t, []uint64{3}, counts)
	assert.Equal(t, []error{nil}, locals)
	assert.Zero(t, r.ranks[0].dev.Calls(sim.OpAllReduce))
	r.requireReleased(t)

	// A local failure is agreed on too, and returned.
	r.ranks[0].pinFail = errs.New("Comm.AllReduce", errs.KindUnknownHandle, "rank 0 recv", "x")
	call.Parts = r.parts()
	err := collective.Run(t.Context(), call)
	require.ErrorIs(t, err, errs.ErrUnknownHandle)
	require.Len(t, locals, 2)
	assert.Same(t, r.ranks[0].pinFail, locals[1])
	assert.Zero(t, r.ranks[0].dev.Calls(sim.OpAllReduce))
	r.requireReleased(t)
}
