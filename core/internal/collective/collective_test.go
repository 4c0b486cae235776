package collective_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/collective"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func i32s(v ...int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// rank is one device of a rig: its pool, its send and recv buffers, and a
// ledger of what the callbacks saw.
type rank struct {
	dev              *sim.Device
	pool             *streams.Pool
	send, recv       uint64
	sendLen, recvLen int
	pins, unpins     int
	pinFail          error
	held             []string // ops Hold was called with
	freed            int      // held items released
	fenced           int
}

// rig is a simulated machine with one pool and one communicator per device.
type rig struct {
	m       *sim.Machine
	ranks   []*rank
	comms   []driver.Communicator
	aborted int
}

func newRig(t *testing.T, n int) *rig {
	t.Helper()
	m, err := sim.NewMachine(sim.MachineConfig{Devices: n})
	require.NoError(t, err)
	r := &rig{m: m}
	for i := 0; i < n; i++ {
		d := m.Device(i)
		r.ranks = append(r.ranks, &rank{dev: d, pool: streams.NewPool(d, nil, streams.DefaultMaxIdle)})
	}
	cd, err := collective.Of("Group.AllReduce", m.Device(0), "use a sim.Machine")
	require.NoError(t, err)
	r.comms, err = collective.Build("Group.AllReduce", cd, m.Drivers())
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range r.comms {
			if c != nil {
				_ = c.Destroy() // aborted ones refuse: they are released already
			}
		}
		for _, k := range r.ranks {
			require.NoError(t, k.pool.Close())
			for _, p := range []uint64{k.send, k.recv} {
				if p != 0 {
					require.NoError(t, k.dev.MemFree(p))
				}
			}
		}
		sim.RequireMachineNoLeaks(t, m)
	})
	return r
}

// buffers gives rank i a send buffer holding send (none when nil) and a
// zeroed recv buffer of recvLen bytes.
func (r *rig) buffers(t *testing.T, i int, send []byte, recvLen int) {
	t.Helper()
	k := r.ranks[i]
	var err error
	if send != nil {
		k.send, err = k.dev.MemAlloc(uint64(len(send)))
		require.NoError(t, err)
		require.NoError(t, k.dev.WriteDevice(k.send, send))
		k.sendLen = len(send)
	}
	k.recv, err = k.dev.MemAlloc(uint64(recvLen))
	require.NoError(t, err)
	require.NoError(t, k.dev.WriteDevice(k.recv, make([]byte, recvLen)))
	k.recvLen = recvLen
}

func (r *rig) parts() []*collective.Part {
	parts := make([]*collective.Part, len(r.ranks))
	for i, k := range r.ranks {
		parts[i] = &collective.Part{Rank: i, Communicator: r.comms[i], Drv: k.dev, Pool: k.pool, SendLen: k.sendLen, RecvLen: k.recvLen,
			Pin: func(_ string, send bool) (uint64, uint64, error) {
				if k.pinFail != nil {
					return 0, 0, k.pinFail
				}
				k.pins++
				if !send {
					return k.recv, k.recv, nil
				}
				return k.recv, k.send, nil
			},
			Unpin: func(string) { k.unpins++ },
			Hold: func(op string) streams.Hold {
				k.held = append(k.held, op)
				return streams.Hold{Items: []streams.Item{{Kind: streams.BufferRef, Bytes: uint64(k.recvLen), Release: func() { k.freed++ }}}}
			},
			Fenced: func() { k.fenced++ },
		}
	}
	return parts
}

func (r *rig) abort() {
	r.aborted++
	for _, c := range r.comms {
		_ = c.Abort()
	}
	r.comms = make([]driver.Communicator, len(r.comms))
}

func (r *rig) run(a collective.Args) error {
	a.Ranks = len(r.ranks)
	var grp driver.CollectiveDriver
	if len(r.ranks) > 1 {
		grp = r.m.Device(0)
	}
	return collective.Run(context.Background(), &collective.Call{Op: "Group." + a.Kind.String(), Args: a, Parts: r.parts(), Group: grp, Abort: r.abort})
}

func (r *rig) recv(t *testing.T, i int) []byte {
	t.Helper()
	k := r.ranks[i]
	b, err := k.dev.ReadDevice(k.recv, k.recvLen)
	require.NoError(t, err)
	return b
}

// requireReleased checks that every rank's pins were dropped and its
// leases given back.
func (r *rig) requireReleased(t *testing.T) {
	t.Helper()
	for i, k := range r.ranks {
		assert.Equal(t, k.pins, k.unpins, "rank %d: every pin dropped", i)
		assert.Zero(t, k.pool.Counts().Leases, "rank %d: leases back", i)
	}
}

func TestKindNames(t *testing.T) {
	for k, want := range map[collective.Kind]string{collective.AllReduce: "AllReduce", collective.Broadcast: "Broadcast",
		collective.AllGather: "AllGather", collective.ReduceScatter: "ReduceScatter", collective.Kind(9): "collective 9"} {
		assert.Equal(t, want, k.String())
	}
}

func TestArgsCheck(t *testing.T) {
	for _, tc := range []struct {
		a    collective.Args
		want string // "" when valid
	}{
		{collective.Args{Kind: collective.AllReduce, DT: driver.DataFloat32, Red: driver.ReduceSum, Ranks: 2}, ""},
		{collective.Args{Kind: collective.AllGather, DT: driver.DataUint8, Ranks: 1}, ""},
		{collective.Args{Kind: collective.Broadcast, DT: driver.DataUint8, Root: 2, Ranks: 3}, ""},
		{collective.Args{Kind: collective.AllReduce, DT: driver.DataType(99), Red: driver.ReduceSum, Ranks: 2}, "data type 99"},
		{collective.Args{Kind: collective.ReduceScatter, DT: driver.DataInt32, Ranks: 2}, "reduction 0"},
		{collective.Args{Kind: collective.Broadcast, DT: driver.DataUint8, Root: 2, Ranks: 2}, "root 2 of 2 ranks"},
		{collective.Args{Kind: collective.Broadcast, DT: driver.DataUint8, Root: -1, Ranks: 2}, "root -1 of 2 ranks"},
		{collective.Args{Kind: collective.AllGather, DT: driver.DataUint8}, "root 0 of 0 ranks"},
	} {
		err := tc.a.Check("Group.X")
		if tc.want == "" {
			assert.NoError(t, err, "%+v", tc.a)
			continue
		}
		require.ErrorIs(t, err, errs.ErrInvalidArgument, "%+v", tc.a)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "Group.X")
	}
}

func TestArgsShape(t *testing.T) {
	f32 := func(k collective.Kind, ranks int) collective.Args {
		return collective.Args{Kind: k, DT: driver.DataFloat32, Red: driver.ReduceSum, Ranks: ranks, Root: 1}
	}
	for _, tc := range []struct {
		a                collective.Args
		rank, send, recv int
		count            uint64
		want             string // "" when valid
	}{
		{f32(collective.AllReduce, 2), 0, 16, 16, 4, ""},
		{f32(collective.AllReduce, 2), 0, 16, 8, 0, "send has 16 bytes and recv 8 bytes"},
		{f32(collective.AllReduce, 2), 1, 6, 6, 0, "rank 1: send 6 bytes, recv 6 bytes are not whole float32 elements (4 bytes each)"},
		{f32(collective.Broadcast, 2), 1, 16, 16, 4, ""},
		{f32(collective.Broadcast, 2), 1, 8, 16, 0, "does not fit 2 ranks"},
		{f32(collective.Broadcast, 2), 0, 0, 16, 4, ""}, // not the root: send is not read
		{f32(collective.Broadcast, 2), 0, 3, 16, 4, ""},
		{f32(collective.AllGather, 3), 2, 8, 24, 2, ""},
		{f32(collective.AllGather, 3), 2, 8, 16, 0, "does not fit 3 ranks"},
		{f32(collective.AllGather, 3), 0, 4, 20, 0, "does not fit 3 ranks"}, // 5 elements over 3 ranks
		{f32(collective.ReduceScatter, 3), 0, 24, 8, 2, ""},
		{f32(collective.ReduceScatter, 3), 0, 16, 8, 0, "does not fit 3 ranks"},
		{f32(collective.AllGather, 0), 0, 4, 4, 0, "root 1 of 0 ranks"}, // refused by Check, no division by zero
		{collective.Args{Kind: collective.AllReduce, Red: driver.ReduceSum, Ranks: 1}, 0, 4, 4, 0, "data type 0"},
	} {
		count, err := tc.a.Shape("Group.X", tc.rank, tc.send, tc.recv)
		name := fmt.Sprintf("%s rank %d send %d recv %d of %d", tc.a.Kind, tc.rank, tc.send, tc.recv, tc.a.Ranks)
		if tc.want == "" {
			require.NoError(t, err, name)
			assert.Equal(t, tc.count, count, name)
			continue
		}
		require.ErrorIs(t, err, errs.ErrInvalidArgument, name)
		assert.Contains(t, err.Error(), tc.want, name)
		assert.Zero(t, count, name)
	}
}

// TestRunEveryKind runs each collective over three devices and checks the
// recv buffers against values computed here, one fence per device.
func TestRunEveryKind(t *testing.T) {
	for _, tc := range []struct {
		args    collective.Args
		send    func(i int) []byte
		recvLen int
		want    func(i int) []byte
	}{
		{collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum},
			func(i int) []byte { return i32s(int32(i+1), int32(-10*i)) }, 8,
			func(int) []byte { return i32s(6, -30) }},
		{collective.Args{Kind: collective.Broadcast, DT: driver.DataInt32, Root: 1},
			func(i int) []byte {
				if i != 1 {
					return nil
				}
				return i32s(7, 8)
			}, 8,
			func(int) []byte { return i32s(7, 8) }},
		{collective.Args{Kind: collective.AllGather, DT: driver.DataInt32},
			func(i int) []byte { return i32s(int32(i)) }, 12,
			func(int) []byte { return i32s(0, 1, 2) }},
		{collective.Args{Kind: collective.ReduceScatter, DT: driver.DataInt32, Red: driver.ReduceMax},
			func(i int) []byte { return i32s(int32(i), int32(5-i), 9) }, 4,
			func(i int) []byte { return [][]byte{i32s(2), i32s(5), i32s(9)}[i] }},
	} {
		t.Run(tc.args.Kind.String(), func(t *testing.T) {
			r := newRig(t, 3)
			for i := range r.ranks {
				r.buffers(t, i, tc.send(i), tc.recvLen)
			}
			require.NoError(t, r.run(tc.args))
			for i, k := range r.ranks {
				assert.Equal(t, tc.want(i), r.recv(t, i), "rank %d", i)
				assert.Equal(t, 1, k.fenced, "rank %d: one fence", i)
				assert.Equal(t, 1, k.pins, "rank %d", i)
				assert.Equal(t, uint64(1), k.dev.Calls(sim.OpStreamSynchronize), "rank %d: one fence", i)
			}
			assert.Zero(t, r.aborted)
			r.requireReleased(t)
		})
	}
}

// TestRunRefusalsQueueNothing: a bad shape on the last rank pins nothing
// at all (every rank's shape is checked first); a failed pin or a failed
// lease on the last rank gives back what the earlier ranks took. None
// queues or aborts anything.
func TestRunRefusalsQueueNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spoil  func(r *rig)
		kind   error
		pinned int // pins taken by ranks 0 and 1 before the refusal
	}{
		{"shape", func(r *rig) { r.ranks[2].recvLen = 4 }, errs.ErrInvalidArgument, 0},
		{"pin", func(r *rig) {
			r.ranks[2].pinFail = errs.New("Group.AllReduce", errs.KindUnknownHandle, "rank 2 recv", "x")
		}, errs.ErrUnknownHandle, 2},
		{"lease", func(r *rig) { r.ranks[2].dev.FailNth(sim.OpStreamCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, errs.ErrDriver, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 3)
			for i := range r.ranks {
				r.buffers(t, i, i32s(1, 2), 8)
			}
			tc.spoil(r)
			err := r.run(collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum})
			require.ErrorIs(t, err, tc.kind)
			for i, k := range r.ranks {
				assert.Zero(t, k.dev.Calls(sim.OpAllReduce), "rank %d: nothing queued", i)
				assert.Zero(t, k.dev.Calls(sim.OpGroupStart), "rank %d", i)
				assert.Zero(t, k.fenced, "rank %d", i)
			}
			assert.Equal(t, tc.pinned, r.ranks[0].pins+r.ranks[1].pins, "the ranks before the last")
			assert.Zero(t, r.aborted)
			r.requireReleased(t)
		})
	}
}

// TestRunDriverFailures fails each driver call Run makes: the error names
// the call (and the rank), every stream is drained, every pin dropped, and
// the communicators are aborted exactly when some part may wait forever.
func TestRunDriverFailures(t *testing.T) {
	for _, tc := range []struct {
		op      sim.Op
		dev     int
		text    string
		aborted int
		fenced  int // fences that succeeded, on rank 0
	}{
		{sim.OpGroupStart, 0, "GroupStart failed", 0, 0},
		{sim.OpAllReduce, 0, "rank 0: AllReduce failed", 0, 0},
		{sim.OpAllReduce, 1, "rank 1: AllReduce failed", 1, 0},
		{sim.OpGroupEnd, 0, "GroupEnd failed", 1, 0},
		{sim.OpStreamSynchronize, 0, "rank 0: StreamSynchronize failed", 1, 0},
		{sim.OpStreamSynchronize, 1, "rank 1: StreamSynchronize failed", 1, 1},
	} {
		t.Run(fmt.Sprintf("%s on %d", tc.op, tc.dev), func(t *testing.T) {
			r := newRig(t, 2)
			for i := range r.ranks {
				r.buffers(t, i, i32s(1, 2), 8)
			}
			r.ranks[tc.dev].dev.FailNth(tc.op, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			err := r.run(collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum})
			require.ErrorIs(t, err, errs.ErrDriver)
			require.ErrorIs(t, err, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			assert.Contains(t, err.Error(), tc.text)
			assert.Equal(t, tc.aborted, r.aborted)
			assert.Equal(t, tc.fenced, r.ranks[0].fenced)
			assert.Zero(t, r.ranks[1].fenced)
			for i, k := range r.ranks {
				assert.Empty(t, k.held, "rank %d: every stream drained", i)
				assert.Zero(t, k.pool.Counts().Quarantined, "rank %d", i)
			}
			r.requireReleased(t)
		})
	}
}

// TestRunUndrainableStreamIsQuarantined: when a rank's fence and the drain
// after it fail, its lease and what Hold names wait in the quarantine
// until the stream synchronizes; its pin is dropped all the same.
func TestRunUndrainableStreamIsQuarantined(t *testing.T) {
	r := newRig(t, 1)
	r.buffers(t, 0, i32s(1, 2), 8)
	k := r.ranks[0]
	k.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	k.dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	err := r.run(collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum})
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Equal(t, 1, r.aborted)
	assert.Equal(t, []string{"Group.AllReduce"}, k.held)
	assert.Equal(t, 1, k.pool.Counts().Quarantined)
	assert.Zero(t, k.freed)
	assert.Equal(t, k.pins, k.unpins)
	require.True(t, k.pool.RetryQuarantine())
	assert.Equal(t, 1, k.freed)
	assert.Zero(t, k.pool.Counts().Leases)
}

// failingComm fails every AllReduce: the one rank of a call whose other
// ranks live elsewhere.
type failingComm struct{ driver.Communicator }

func (failingComm) AllReduce(uint64, uint64, uint64, driver.DataType, driver.ReduceOp, driver.Stream) error {
	return cudaapi.CUDA_ERROR_LAUNCH_FAILED
}

// TestRunAbortsForRanksOutsideTheCall: a part that fails to queue aborts
// the communicator when other ranks (in other processes) wait for it,
// even though nothing of this call was queued.
func TestRunAbortsForRanksOutsideTheCall(t *testing.T) {
	r := newRig(t, 1)
	r.buffers(t, 0, i32s(1), 4)
	parts := r.parts()
	parts[0].Communicator = failingComm{}
	a := collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum, Ranks: 2}
	err := collective.Run(context.Background(), &collective.Call{Op: "Comm.AllReduce", Args: a, Parts: parts, Abort: r.abort})
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "rank 0: AllReduce failed")
	assert.Equal(t, 1, r.aborted)
	r.requireReleased(t)
}

// recordingComm records the addresses and count of each Broadcast and
// queues nothing.
type recordingComm struct {
	driver.Communicator
	send, recv, count uint64
}

func (c *recordingComm) Broadcast(send, recv uint64, count uint64, _ driver.DataType, _ int, _ driver.Stream) error {
	c.send, c.recv, c.count = send, recv, count
	return nil
}

// TestRunUsesThePartsRank: a part of one rank among several (a joined
// communicator) reads its send buffer by its own rank, not its place in
// the call: the root's send is pinned and passed, another rank's is not.
func TestRunUsesThePartsRank(t *testing.T) {
	for _, root := range []int{0, 1} {
		r := newRig(t, 1)
		r.buffers(t, 0, i32s(5, 6), 8)
		parts := r.parts()
		parts[0].Rank = 1
		var asked []bool
		pin := parts[0].Pin
		parts[0].Pin = func(op string, send bool) (uint64, uint64, error) {
			asked = append(asked, send)
			return pin(op, send)
		}
		if root != 1 {
			parts[0].SendLen = 0 // the zero Buffer
		}
		rc := &recordingComm{}
		parts[0].Communicator = rc
		a := collective.Args{Kind: collective.Broadcast, DT: driver.DataInt32, Root: root, Ranks: 2}
		require.NoError(t, collective.Run(context.Background(), &collective.Call{Op: "Comm.Broadcast", Args: a, Parts: parts, Abort: r.abort}), "root %d", root)
		k := r.ranks[0]
		assert.Equal(t, []bool{root == 1}, asked, "root %d: the send buffer is pinned on the root only", root)
		wantSend := k.recv
		if root == 1 {
			wantSend = k.send
		}
		assert.Equal(t, wantSend, rc.send, "root %d", root)
		assert.Equal(t, k.recv, rc.recv, "root %d", root)
		assert.Equal(t, uint64(2), rc.count, "root %d", root)
		r.requireReleased(t)
	}
}

// TestRunLeaseFailureOnAMiddleRankReleasesEveryRank: when the lease of a
// rank between others fails, that rank's own pin is dropped as well as the
// earlier ranks', the later rank is never pinned, and every lease is back.
func TestRunLeaseFailureOnAMiddleRankReleasesEveryRank(t *testing.T) {
	r := newRig(t, 3)
	for i := range r.ranks {
		r.buffers(t, i, i32s(1, 2), 8)
	}
	r.ranks[1].dev.FailNth(sim.OpStreamCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	err := r.run(collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum})
	require.ErrorIs(t, err, errs.ErrDriver)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	assert.Equal(t, []int{1, 1, 0}, []int{r.ranks[0].pins, r.ranks[1].pins, r.ranks[2].pins}, "ranks 0 and 1 were pinned before rank 1's lease failed")
	for i, k := range r.ranks {
		assert.Equal(t, k.pins, k.unpins, "rank %d: its pin is dropped", i)
		assert.Zero(t, k.dev.Calls(sim.OpAllReduce), "rank %d: nothing queued", i)
	}
	assert.Zero(t, r.aborted)
	r.requireReleased(t)
}
