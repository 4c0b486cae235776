package core_test

import (
	"bytes"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// openMachine opens a Group over a simulated machine of n devices with the
// given peer matrix (nil: all pairs) and checks for leaks at cleanup.
func openMachine(t testing.TB, n int, peer [][]bool) (*core.Group, *sim.Machine) {
	t.Helper()
	m, err := sim.NewMachine(sim.MachineConfig{Devices: n, Peer: peer, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers())
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = g.Close() // a test that closed it already gets ErrClosed
		sim.RequireMachineNoLeaks(t, m)
	})
	return g, m
}

// putBytes allocates a buffer on b holding data.
func putBytes(t testing.TB, b *core.Backend, data []byte) core.Buffer {
	t.Helper()
	h, err := b.Alloc(len(data))
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	return h
}

func getBytes(t testing.TB, b *core.Backend, h core.Buffer) []byte {
	t.Helper()
	out, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	return out
}

// TestPeerCopyEveryLink copies both ways between two devices over each kind
// of link, and checks the bytes and which driver operations moved them.
func TestPeerCopyEveryLink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peer   [][]bool
		direct bool
	}{
		{"direct", nil, true},
		{"staged", [][]bool{{true, false}, {false, true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, m := openMachine(t, 2, tc.peer)
			rng := rand.New(rand.NewSource(1))
			a, b := g.Backends()[0], g.Backends()[1]
			srcData := randomBytes(rng, 3000)
			src := putBytes(t, a, srcData)
			dst := putBytes(t, b, make([]byte, 5000))
			// Two copies that continue each other fuse into one.
			require.NoError(t, core.CopyPeer(b, a, []core.PeerCopy{
				{Dst: dst, DstOffset: 100, Src: src, SrcOffset: 0, Len: 1000},
				{Dst: dst, DstOffset: 1100, Src: src, SrcOffset: 1000, Len: 2000},
			}))
			want := make([]byte, 5000)
			copy(want[100:], srcData)
			assert.Equal(t, want, getBytes(t, b, dst))
			// And back the other way.
			back := putBytes(t, a, make([]byte, 3000))
			require.NoError(t, core.CopyPeer(a, b, []core.PeerCopy{{Dst: back, Src: dst, SrcOffset: 100, Len: 3000}}))
			assert.Equal(t, srcData, getBytes(t, a, back))
			d0, d1 := m.Device(0), m.Device(1)
			if tc.direct {
				assert.Equal(t, uint64(1), d1.Calls(sim.OpMemcpyPeerAsync), "fused into one peer copy")
				assert.Equal(t, uint64(1), d0.Calls(sim.OpMemcpyPeerAsync))
				assert.Equal(t, uint64(1), d1.Calls(sim.OpEnablePeerAccess))
			} else {
				assert.Zero(t, d0.Calls(sim.OpMemcpyPeerAsync)+d1.Calls(sim.OpMemcpyPeerAsync))
				assert.Zero(t, d0.Calls(sim.OpEnablePeerAccess)+d1.Calls(sim.OpEnablePeerAccess))
				assert.Equal(t, uint64(1), d1.Calls(sim.OpStreamWaitEvent))
			}
			// Peer access is enabled once and remembered.
			require.NoError(t, core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 1}}))
			assert.LessOrEqual(t, d1.Calls(sim.OpEnablePeerAccess), uint64(1))
			assert.LessOrEqual(t, d1.Calls(sim.OpPeerLink), uint64(1))
		})
	}
}

// TestPeerCopySameDevice copies between two Backends over one device, and
// within one Backend: device-to-device copies in one context.
func TestPeerCopySameDevice(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: 16 << 20})
	defer sim.RequireNoLeaks(t, dev)
	a, err := core.Open(dev)
	require.NoError(t, err)
	b, err := core.Open(dev)
	require.NoError(t, err)
	rng := rand.New(rand.NewSource(2))
	data := randomBytes(rng, 4096)
	src := putBytes(t, a, data)
	dst := putBytes(t, b, make([]byte, 4096))
	require.NoError(t, core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 4096}}))
	assert.Equal(t, data, getBytes(t, b, dst))
	assert.Equal(t, uint64(1), dev.Calls(sim.OpMemcpyDtoDAsync))
	assert.Zero(t, dev.Calls(sim.OpPeerLink), "one driver needs no link query")

	// Within one Backend, between two ranges of one buffer that do not overlap.
	require.NoError(t, core.CopyPeer(a, a, []core.PeerCopy{{Dst: src, DstOffset: 0, Src: src, SrcOffset: 2048, Len: 2048}}))
	want := append(append([]byte(nil), data[2048:]...), data[2048:]...)
	assert.Equal(t, want, getBytes(t, a, src))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// TestPeerCopyRefusesBadInput: every bad request fails before anything is
// queued, with nothing changed and no buffer left in flight.
func TestPeerCopyRefusesBadInput(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	a, b := g.Backends()[0], g.Backends()[1]
	src := putBytes(t, a, bytes.Repeat([]byte{7}, 100))
	dst := putBytes(t, b, make([]byte, 100))
	before := m.Device(1).CallCounts()
	for _, tc := range []struct {
		name     string
		dst, src *core.Backend
		copies   []core.PeerCopy
		sentinel error
		numbers  []any
	}{
		{"nil backend", nil, a, nil, core.ErrInvalidArgument, nil},
		{"foreign destination", b, a, []core.PeerCopy{{Dst: src, Src: src, Len: 1}}, core.ErrUnknownHandle, []any{src.ID}},
		{"foreign source", b, a, []core.PeerCopy{{Dst: dst, Src: dst, Len: 1}}, core.ErrUnknownHandle, []any{dst.ID}},
		{"negative length", b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: -1}}, core.ErrInvalidArgument, []any{-1}},
		{"destination range", b, a, []core.PeerCopy{{Dst: dst, DstOffset: 60, Src: src, Len: 50}}, core.ErrInvalidArgument, []any{50, 60, 100}},
		{"source range", b, a, []core.PeerCopy{{Dst: dst, Src: src, SrcOffset: -1, Len: 5}}, core.ErrInvalidArgument, []any{-1}},
		{"overlap in one buffer", a, a, []core.PeerCopy{{Dst: src, DstOffset: 10, Src: src, Len: 20}}, core.ErrInvalidArgument, []any{20, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireKind(t, core.CopyPeer(tc.dst, tc.src, tc.copies), tc.sentinel, tc.numbers...)
		})
	}
	assert.Equal(t, before, m.Device(1).CallCounts(), "nothing reached the device")
	// Nothing stayed in flight: both buffers free.
	require.NoError(t, a.Free(src))
	require.NoError(t, b.Free(dst))
	// Zero-length copies touch nothing.
	require.NoError(t, core.CopyPeer(b, a, nil))
	// A closed Backend refuses.
	require.NoError(t, g.Close())
	requireKind(t, core.CopyPeer(b, a, nil), core.ErrClosed)
}

// TestPeerCopyUnsupportedDrivers: devices of two different machines cannot
// reach each other.
func TestPeerCopyUnsupportedDrivers(t *testing.T) {
	a, _ := openSim(t, sim.Config{})
	b, _ := openSim(t, sim.Config{})
	src := putBytes(t, a, []byte{1, 2, 3})
	dst := putBytes(t, b, []byte{0, 0, 0})
	err := core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 3}})
	requireKind(t, err, core.ErrDriver)
	var r cudaapi.Result
	require.ErrorAs(t, err, &r)
	assert.Equal(t, cudaapi.CUDA_ERROR_INVALID_DEVICE, r)
	require.NoError(t, a.Free(src))
	require.NoError(t, b.Free(dst))
}

// TestPeerCopyFaultsLeakNothing injects a failure into every driver
// operation a peer copy uses, on every link: the call fails with the
// driver's code, the destination keeps its bytes or holds the new ones
// (never a mix of other data), nothing stays in flight, and after Close
// nothing leaks.
func TestPeerCopyFaultsLeakNothing(t *testing.T) {
	ops := []sim.Op{sim.OpPeerLink, sim.OpEnablePeerAccess, sim.OpMemcpyPeerAsync, sim.OpMemcpyDtoHAsync,
		sim.OpMemcpyHtoDAsync, sim.OpEventRecord, sim.OpStreamWaitEvent, sim.OpStreamSynchronize}
	fired := map[sim.Op]bool{}
	for _, peer := range [][][]bool{nil, {{true, false}, {false, true}}} {
		for _, o := range ops {
			for _, dev := range []int{0, 1} {
				g, m := openMachine(t, 2, peer)
				a, b := g.Backends()[0], g.Backends()[1]
				data := bytes.Repeat([]byte{9}, 1<<12)
				src := putBytes(t, a, data)
				old := bytes.Repeat([]byte{1}, 1<<12)
				dst := putBytes(t, b, old)
				m.Device(dev).FailNth(o, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
				err := core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: len(data)}})
				m.Device(dev).ClearFaults()
				if err != nil {
					fired[o] = true
					var r cudaapi.Result
					require.ErrorAs(t, err, &r, "%s on device %d", o, dev)
					assert.Equal(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, r)
				}
				got := getBytes(t, b, dst)
				assert.True(t, bytes.Equal(got, old) || bytes.Equal(got, data), "%s on device %d: mixed bytes", o, dev)
				require.NoError(t, a.Free(src), "%s on device %d", o, dev)
				require.NoError(t, b.Free(dst), "%s on device %d", o, dev)
				require.NoError(t, g.Close(), "%s on device %d", o, dev)
				sim.RequireMachineNoLeaks(t, m)
			}
		}
	}
	for _, o := range ops {
		assert.True(t, fired[o], "no peer copy used %s", o)
	}
}

// TestPeerCopyInFlightBlocksFree: a buffer in a running peer copy cannot be
// freed, and Close waits for the copy; concurrent copies both ways do not
// deadlock against each other or Close.
func TestPeerCopyMultiDeviceConcurrent(t *testing.T) {
	g, _ := openMachine(t, 3, [][]bool{{true, true, false}, {true, true, true}, {false, true, true}})
	rng := rand.New(rand.NewSource(3))
	bufs := make([]core.Buffer, 3)
	datas := make([][]byte, 3)
	for i := range bufs {
		datas[i] = randomBytes(rng, 1<<14)
		bufs[i] = putBytes(t, g.Backends()[i], datas[i])
	}
	outs := make([]core.Buffer, 9)
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			h, err := g.Backends()[j].Alloc(1 << 14)
			require.NoError(t, err)
			outs[i*3+j] = h
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func(i, j int) {
				defer wg.Done()
				for k := 0; k < 5; k++ {
					assert.NoError(t, core.CopyPeer(g.Backends()[j], g.Backends()[i], []core.PeerCopy{{Dst: outs[i*3+j], Src: bufs[i], Len: 1 << 14}}))
				}
			}(i, j)
		}
	}
	wg.Wait()
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			assert.Equal(t, datas[i], getBytes(t, g.Backends()[j], outs[i*3+j]), "%d -> %d", i, j)
		}
	}
	require.NoError(t, g.Close())
	requireKind(t, g.Close(), core.ErrClosed)
}

// TestPeerCopyMatchesModel runs random batches of peer copies among three
// simulated devices (one pair without peer access, so every path is used,
// plus copies within one Backend) and compares every buffer with a plain
// model after each batch: copies apply in order, each reading what the ones
// before it wrote.
func TestPeerCopyMatchesModel(t *testing.T) {
	g, _ := openMachine(t, 3, [][]bool{{true, true, false}, {true, true, true}, {false, true, true}})
	rng := rand.New(rand.NewSource(6))
	const perDev, size = 2, 512
	type loc struct{ dev, buf int }
	bufs := make([][]core.Buffer, 3)
	model := make([][][]byte, 3)
	for d := 0; d < 3; d++ {
		for k := 0; k < perDev; k++ {
			data := randomBytes(rng, size)
			bufs[d] = append(bufs[d], putBytes(t, g.Backends()[d], data))
			model[d] = append(model[d], data)
		}
	}
	for round := 0; round < 60; round++ {
		dd, sd := rng.Intn(3), rng.Intn(3)
		var copies []core.PeerCopy
		var locs [][2]loc
		for k := rng.Intn(5); k >= 0; k-- {
			n := rng.Intn(size/2 + 1)
			c := core.PeerCopy{Len: n, DstOffset: rng.Intn(size - n + 1), SrcOffset: rng.Intn(size - n + 1)}
			di, si := rng.Intn(perDev), rng.Intn(perDev)
			if dd == sd && di == si && c.DstOffset < c.SrcOffset+n && c.SrcOffset < c.DstOffset+n {
				continue // overlapping ranges of one buffer are refused (tested elsewhere)
			}
			if len(copies) > 0 && rng.Intn(3) == 0 { // continue the previous copy: fusable
				p := copies[len(copies)-1]
				if p.DstOffset+p.Len+n <= size && p.SrcOffset+p.Len+n <= size {
					c.DstOffset, c.SrcOffset = p.DstOffset+p.Len, p.SrcOffset+p.Len
					di, si = locs[len(locs)-1][0].buf, locs[len(locs)-1][1].buf
					if dd == sd && di == si && c.DstOffset < c.SrcOffset+n && c.SrcOffset < c.DstOffset+n {
						continue
					}
				}
			}
			c.Dst, c.Src = bufs[dd][di], bufs[sd][si]
			copies = append(copies, c)
			locs = append(locs, [2]loc{{dd, di}, {sd, si}})
		}
		require.NoError(t, core.CopyPeer(g.Backends()[dd], g.Backends()[sd], copies), "round %d", round)
		for i, c := range copies {
			src := append([]byte(nil), model[sd][locs[i][1].buf][c.SrcOffset:c.SrcOffset+c.Len]...)
			copy(model[dd][locs[i][0].buf][c.DstOffset:], src)
		}
		for d := 0; d < 3; d++ {
			for k := 0; k < perDev; k++ {
				require.Equal(t, model[d][k], getBytes(t, g.Backends()[d], bufs[d][k]), "round %d device %d buffer %d", round, d, k)
			}
		}
	}
}
