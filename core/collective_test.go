package core_test

import (
	"encoding/binary"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func i32Bytes(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// TestAllReduceMultiDevice sums float32 vectors (small integers, so every
// order of summation gives the same exact result) and takes the max of
// int32 vectors in place, across three simulated devices, against sums
// computed here.
func TestAllReduceMultiDevice(t *testing.T) {
	g, _ := openMachine(t, 3, [][]bool{{true, false, false}, {false, true, false}, {false, false, true}})
	rng := rand.New(rand.NewSource(4))
	const n = 1000
	vals := make([][]float32, 3)
	sum := make([]float32, n)
	ints := make([][]int32, 3)
	maxv := make([]int32, n)
	for r := range vals {
		vals[r] = make([]float32, n)
		ints[r] = make([]int32, n)
		for i := range vals[r] {
			vals[r][i] = float32(rng.Intn(2000) - 1000)
			sum[i] += vals[r][i]
			ints[r][i] = rng.Int31() - 1<<30
			if r == 0 || ints[r][i] > maxv[i] {
				maxv[i] = ints[r][i]
			}
		}
	}
	send, recv, inplace := make([]core.Buffer, 3), make([]core.Buffer, 3), make([]core.Buffer, 3)
	for r := 0; r < 3; r++ {
		send[r] = putBytes(t, g.Backends()[r], f32Bytes(vals[r]))
		recv[r] = putBytes(t, g.Backends()[r], make([]byte, 4*n))
		inplace[r] = putBytes(t, g.Backends()[r], i32Bytes(ints[r]))
	}
	require.NoError(t, g.AllReduce(send, recv, core.DataFloat32, core.ReduceSum))
	require.NoError(t, g.AllReduce(inplace, inplace, core.DataInt32, core.ReduceMax))
	for r := 0; r < 3; r++ {
		assert.Equal(t, f32Bytes(sum), getBytes(t, g.Backends()[r], recv[r]), "rank %d sum", r)
		assert.Equal(t, f32Bytes(vals[r]), getBytes(t, g.Backends()[r], send[r]), "rank %d send unchanged", r)
		assert.Equal(t, i32Bytes(maxv), getBytes(t, g.Backends()[r], inplace[r]), "rank %d max", r)
	}
}

// TestCollectiveBroadcastGatherScatter checks the other three collectives
// against their definitions.
func TestCollectiveBroadcastGatherScatter(t *testing.T) {
	g, _ := openMachine(t, 2, nil)
	rng := rand.New(rand.NewSource(5))
	a, b := g.Backends()[0], g.Backends()[1]

	root := randomBytes(rng, 64)
	src := putBytes(t, b, root)
	recv := []core.Buffer{putBytes(t, a, make([]byte, 64)), putBytes(t, b, make([]byte, 64))}
	require.NoError(t, g.Broadcast(1, src, recv, core.DataUint8))
	assert.Equal(t, root, getBytes(t, a, recv[0]))
	assert.Equal(t, root, getBytes(t, b, recv[1]))

	parts := [][]byte{randomBytes(rng, 32), randomBytes(rng, 32)}
	send := []core.Buffer{putBytes(t, a, parts[0]), putBytes(t, b, parts[1])}
	all := []core.Buffer{putBytes(t, a, make([]byte, 64)), putBytes(t, b, make([]byte, 64))}
	require.NoError(t, g.AllGather(send, all, core.DataInt64))
	want := append(append([]byte(nil), parts[0]...), parts[1]...)
	assert.Equal(t, want, getBytes(t, a, all[0]))
	assert.Equal(t, want, getBytes(t, b, all[1]))

	x := [][]int32{{1, 2, 3, 4}, {10, 20, 30, 40}}
	rs := []core.Buffer{putBytes(t, a, i32Bytes(x[0])), putBytes(t, b, i32Bytes(x[1]))}
	out := []core.Buffer{putBytes(t, a, make([]byte, 8)), putBytes(t, b, make([]byte, 8))}
	require.NoError(t, g.ReduceScatter(rs, out, core.DataInt32, core.ReduceSum))
	assert.Equal(t, i32Bytes([]int32{11, 22}), getBytes(t, a, out[0]))
	assert.Equal(t, i32Bytes([]int32{33, 44}), getBytes(t, b, out[1]))
}

// TestCollectiveRefusesBadInput: bad shapes, types and handles fail with
// nothing queued and nothing left in flight.
func TestCollectiveRefusesBadInput(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	a, b := g.Backends()[0], g.Backends()[1]
	x := []core.Buffer{putBytes(t, a, make([]byte, 16)), putBytes(t, b, make([]byte, 16))}
	odd := []core.Buffer{putBytes(t, a, make([]byte, 6)), putBytes(t, b, make([]byte, 6))}
	before := m.Device(0).CallCounts()
	var nilGroup *core.Group
	for _, tc := range []struct {
		name     string
		err      error
		sentinel error
		numbers  []any
	}{
		{"nil group", nilGroup.AllReduce(x, x, core.DataFloat32, core.ReduceSum), core.ErrInvalidArgument, nil},
		{"count", g.AllReduce(x[:1], x, core.DataFloat32, core.ReduceSum), core.ErrInvalidArgument, []any{1, 2}},
		{"data type", g.AllReduce(x, x, core.DataType(99), core.ReduceSum), core.ErrInvalidArgument, []any{99}},
		{"reduction", g.AllReduce(x, x, core.DataFloat32, core.ReduceOp(0)), core.ErrInvalidArgument, []any{0}},
		{"root", g.Broadcast(2, x[0], x, core.DataUint8), core.ErrInvalidArgument, []any{2}},
		{"whole elements", g.AllReduce(odd, odd, core.DataFloat32, core.ReduceSum), core.ErrInvalidArgument, []any{6, 4}},
		{"gather shape", g.AllGather(x, x, core.DataUint8), core.ErrInvalidArgument, []any{16}},
		{"scatter shape", g.ReduceScatter(x, x, core.DataUint8, core.ReduceSum), core.ErrInvalidArgument, []any{16}},
		{"foreign handle", g.AllReduce([]core.Buffer{x[1], x[1]}, x, core.DataUint8, core.ReduceSum), core.ErrUnknownHandle, []any{x[1].ID}},
	} {
		t.Run(tc.name, func(t *testing.T) { requireKind(t, tc.err, tc.sentinel, tc.numbers...) })
	}
	after := m.Device(0).CallCounts()
	assert.Zero(t, after[sim.OpAllReduce]-before[sim.OpAllReduce])
	for _, h := range x {
		_ = h
	}
	require.NoError(t, a.Free(x[0]), "nothing left in flight")
	require.NoError(t, b.Free(x[1]))
}

// TestCollectiveFaultsLeakNothing fails each operation a collective uses on
// each device: the call reports the driver's code and, after Close,
// nothing is left live (communicators included).
func TestCollectiveFaultsLeakNothing(t *testing.T) {
	ops := []sim.Op{sim.OpNewCommunicators, sim.OpGroupStart, sim.OpGroupEnd, sim.OpAllReduce, sim.OpStreamSynchronize}
	for _, o := range ops {
		for dev := 0; dev < 2; dev++ {
			g, m := openMachine(t, 2, nil)
			x := []core.Buffer{putBytes(t, g.Backends()[0], f32Bytes([]float32{1, 2})), putBytes(t, g.Backends()[1], f32Bytes([]float32{3, 4}))}
			m.Device(dev).FailNth(o, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			err := g.AllReduce(x, x, core.DataFloat32, core.ReduceSum)
			m.Device(dev).ClearFaults()
			if o == sim.OpNewCommunicators || o == sim.OpGroupStart || o == sim.OpGroupEnd {
				if dev == 0 { // these are asked of the first device only
					requireKind(t, err, core.ErrDriver)
				}
			} else {
				requireKind(t, err, core.ErrDriver)
			}
			if err != nil {
				var r cudaapi.Result
				require.ErrorAs(t, err, &r)
				assert.Equal(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, r)
			}
			// The group still works after the failure.
			require.NoError(t, g.AllReduce(x, x, core.DataFloat32, core.ReduceMax), "%s on %d", o, dev)
			require.NoError(t, g.Backends()[0].Free(x[0]))
			require.NoError(t, g.Backends()[1].Free(x[1]))
			require.NoError(t, g.Close())
			sim.RequireMachineNoLeaks(t, m)
		}
	}
}

// TestCommJoinAllReduceAcrossGoroutines is the several-process path, with
// one goroutine per rank: one rank makes the id, every rank joins and
// all-reduces its own buffer.
func TestCommJoinAllReduceAcrossGoroutines(t *testing.T) {
	g, _ := openMachine(t, 3, nil)
	id, err := g.Backends()[0].NewCommID()
	require.NoError(t, err)
	var wg sync.WaitGroup
	results := make([][]byte, 3)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			b := g.Backends()[r]
			c, err := b.JoinComm(id, 3, r)
			if !assert.NoError(t, err) {
				return
			}
			defer func() { assert.NoError(t, c.Close()) }()
			assert.Equal(t, r, c.Rank())
			assert.Equal(t, 3, c.Size())
			h, err := b.Alloc(8)
			if !assert.NoError(t, err) {
				return
			}
			assert.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: i32Bytes([]int32{int32(r + 1), int32(10 * (r + 1))})}))
			for k := 0; k < 3; k++ { // repeated calls meet in order
				assert.NoError(t, c.AllReduce(h, h, core.DataInt32, core.ReduceSum))
			}
			results[r], err = b.Download(h.All(), nil)
			assert.NoError(t, err)
			assert.NoError(t, b.Free(h))
		}(r)
	}
	waitRanks(t, &wg, "the ranks' joins and all-reduces")
	// (1+2+3) summed over three ranks, three times: 6, 18, 54.
	for r := 0; r < 3; r++ {
		assert.Equal(t, i32Bytes([]int32{54, 540}), results[r], "rank %d", r)
	}
}

// TestAllReduceOneRankIsIdentity: a group of one device all-reduces to its
// own input, with no group calls needed.
func TestAllReduceOneRankIsIdentity(t *testing.T) {
	g, m := openMachine(t, 1, nil)
	in := f32Bytes([]float32{1.5, -2, 3e9})
	src := putBytes(t, g.Backends()[0], in)
	dst := putBytes(t, g.Backends()[0], make([]byte, len(in)))
	require.NoError(t, g.AllReduce([]core.Buffer{src}, []core.Buffer{dst}, core.DataFloat32, core.ReduceSum))
	assert.Equal(t, in, getBytes(t, g.Backends()[0], dst))
	assert.Zero(t, m.Device(0).Calls(sim.OpGroupStart))
}

// TestCommFailureAbortsEveryRank: when one rank's all-reduce fails to queue,
// it aborts its communicator; the rank waiting for it fails instead of
// hanging or reporting success, and both Comms refuse further calls.
func TestCommFailureAbortsEveryRank(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	id, err := g.Backends()[0].NewCommID()
	require.NoError(t, err)
	comms := make([]*core.Comm, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c, err := g.Backends()[r].JoinComm(id, 2, r)
			assert.NoError(t, err)
			comms[r] = c
		}(r)
	}
	waitRanks(t, &wg, "the ranks' joins")
	bufs := []core.Buffer{putBytes(t, g.Backends()[0], i32Bytes([]int32{1})), putBytes(t, g.Backends()[1], i32Bytes([]int32{2}))}
	m.Device(0).FailNth(sim.OpAllReduce, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	errs := make([]error, 2)
	for r := 1; r >= 0; r-- { // rank 1 queues first and waits for rank 0
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = comms[r].AllReduce(bufs[r], bufs[r], core.DataInt32, core.ReduceSum)
		}(r)
	}
	waitRanks(t, &wg, "the ranks' all-reduces")
	for r := 0; r < 2; r++ {
		requireKind(t, errs[r], core.ErrDriver)
		requireKind(t, comms[r].AllReduce(bufs[r], bufs[r], core.DataInt32, core.ReduceSum), core.ErrClosed)
		require.NoError(t, comms[r].Close())
		require.NoError(t, g.Backends()[r].Free(bufs[r]), "nothing left in flight")
	}
}

// TestCommBroadcastFromAnyRoot: each rank of a joined communicator
// broadcasts in turn; only the root passes a send buffer (the others pass
// the zero Buffer), and every rank's recv gets the root's bytes.
func TestCommBroadcastFromAnyRoot(t *testing.T) {
	g, _ := openMachine(t, 2, nil)
	id, err := g.Backends()[0].NewCommID()
	require.NoError(t, err)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			b := g.Backends()[r]
			c, err := b.JoinComm(id, 2, r)
			if !assert.NoError(t, err) {
				return
			}
			defer func() { assert.NoError(t, c.Close()) }()
			own := putBytes(t, b, i32Bytes([]int32{int32(10 * (r + 1)), int32(r)}))
			recv := putBytes(t, b, make([]byte, 8))
			for root := 0; root < 2; root++ {
				send := core.Buffer{}
				if r == root {
					send = own
				}
				if !assert.NoError(t, c.Broadcast(root, send, recv, core.DataInt32), "rank %d root %d", r, root) {
					continue
				}
				got, err := b.Download(recv.All(), nil)
				assert.NoError(t, err)
				assert.Equal(t, i32Bytes([]int32{int32(10 * (root + 1)), int32(root)}), got, "rank %d root %d", r, root)
			}
			assert.NoError(t, b.Free(own))
			assert.NoError(t, b.Free(recv))
		}(r)
	}
	waitRanks(t, &wg, "the ranks' broadcasts")
}
