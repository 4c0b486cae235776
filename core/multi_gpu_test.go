//go:build gpu

// Tests and benchmarks of several Backends on real devices: peer copies and
// NCCL collectives. The one-device ones run on any GPU machine; the ones
// named MultiDevice skip unless two or more devices are visible. Run:
//
//	.gpu/core.test -test.run 'GPUPeer|GPUNCCL|GPUMultiDevice' -test.v
//	.gpu/core.test -test.run '^$' -test.bench 'GPUPeerCopy|GPUAllReduce' -test.benchtime 20x

package core_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// openGPUPair opens two Backends on device 0 (one context, two Backends).
func openGPUPair(tb testing.TB) (*core.Backend, *core.Backend) {
	tb.Helper()
	a, err := core.OpenCUDA(0)
	require.NoError(tb, err)
	b, err := core.OpenCUDA(0)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		assert.NoError(tb, a.Close())
		assert.NoError(tb, b.Close())
	})
	return a, b
}

// openAllGPUs opens every device, skipping when fewer than min are visible.
func openAllGPUs(tb testing.TB, min int) *core.Group {
	tb.Helper()
	devs, err := core.Devices()
	require.NoError(tb, err)
	if len(devs) < min {
		tb.Skipf("needs %d devices, %d visible", min, len(devs))
	}
	g, err := core.OpenDevices()
	require.NoError(tb, err)
	tb.Cleanup(func() { assert.NoError(tb, g.Close()) })
	return g
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31) ^ seed ^ byte(i>>11)
	}
	return p
}

func TestGPUPeerCopySameDevice(t *testing.T) {
	a, b := openGPUPair(t)
	const n = 64 << 20
	data := pattern(n, 7)
	src := putBytes(t, a, data)
	dst := putBytes(t, b, make([]byte, n+4096))
	require.NoError(t, core.CopyPeer(b, a, []core.PeerCopy{
		{Dst: dst, DstOffset: 4096, Src: src, Len: n / 2},
		{Dst: dst, DstOffset: 4096 + n/2, Src: src, SrcOffset: n / 2, Len: n / 2}, // fuses with the first
	}))
	got := getBytes(t, b, dst)
	require.Equal(t, make([]byte, 4096), got[:4096])
	require.True(t, bytesEqual(data, got[4096:]), "copied bytes differ")
	// Back the other way, and within one Backend.
	back := putBytes(t, a, make([]byte, n))
	require.NoError(t, core.CopyPeer(a, b, []core.PeerCopy{{Dst: back, Src: dst, SrcOffset: 4096, Len: n}}))
	require.True(t, bytesEqual(data, getBytes(t, a, back)))
	require.NoError(t, core.CopyPeer(a, a, []core.PeerCopy{{Dst: back, Src: src, SrcOffset: 1, Len: n - 1}}))
	require.True(t, bytesEqual(data[1:], getBytes(t, a, back)[:n-1]))
	for _, f := range []func() error{
		func() error { return a.Free(src) }, func() error { return a.Free(back) },
		func() error { return b.Free(dst) },
	} {
		require.NoError(t, f())
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func f32s(n, rank int) []byte {
	out := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32((i*7+rank*3)%1000)))
	}
	return out
}

// skipWithoutNCCL skips when libnccl cannot be loaded, naming why.
func skipWithoutNCCL(t *testing.T, err error) {
	if errors.Is(err, core.ErrUnsupported) {
		t.Skipf("NCCL unavailable: %v", err)
	}
}

// TestGPUNCCLAllRanks runs every collective over all visible devices (one
// rank on a one-GPU machine, where each is the identity) and checks the
// results against sums worked out on the CPU.
func TestGPUNCCLAllRanks(t *testing.T) {
	g := openAllGPUs(t, 1)
	n := g.Len()
	const count = 1 << 20
	send, recv := make([]core.Buffer, n), make([]core.Buffer, n)
	want := make([]float32, count)
	for r := 0; r < n; r++ {
		send[r] = putBytes(t, g.Backends()[r], f32s(count, r))
		recv[r] = putBytes(t, g.Backends()[r], make([]byte, 4*count))
		for i := range want {
			want[i] += float32((i*7 + r*3) % 1000)
		}
	}
	err := g.AllReduce(send, recv, core.DataFloat32, core.ReduceSum)
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	wantBytes := make([]byte, 4*count)
	for i, v := range want {
		binary.LittleEndian.PutUint32(wantBytes[4*i:], math.Float32bits(v))
	}
	for r := 0; r < n; r++ {
		require.True(t, bytesEqual(wantBytes, getBytes(t, g.Backends()[r], recv[r])), "rank %d all-reduce", r)
	}
	// Broadcast from the last rank; AllGather and ReduceScatter shapes.
	require.NoError(t, g.Broadcast(n-1, send[n-1], recv, core.DataFloat32))
	for r := 0; r < n; r++ {
		require.True(t, bytesEqual(f32s(count, n-1), getBytes(t, g.Backends()[r], recv[r])), "rank %d broadcast", r)
	}
	gathered := make([]core.Buffer, n)
	for r := range gathered {
		gathered[r] = putBytes(t, g.Backends()[r], make([]byte, 4*count*n))
	}
	require.NoError(t, g.AllGather(send, gathered, core.DataFloat32))
	for r := 0; r < n; r++ {
		got := getBytes(t, g.Backends()[r], gathered[r])
		for k := 0; k < n; k++ {
			require.True(t, bytesEqual(f32s(count, k), got[4*count*k:4*count*(k+1)]), "rank %d block %d", r, k)
		}
	}
	require.NoError(t, g.ReduceScatter(gathered, recv, core.DataFloat32, core.ReduceMax))
	for r := 0; r < n; r++ {
		// Every rank gathered the same blocks, so the max is block r itself.
		require.True(t, bytesEqual(f32s(count, r), getBytes(t, g.Backends()[r], recv[r])), "rank %d reduce-scatter", r)
	}
	t.Logf("%d rank(s): all-reduce, broadcast, all-gather and reduce-scatter of %d float32 checked", n, count)
}

// TestGPUNCCLJoinOneRank is the several-process path with one rank: an id,
// JoinComm, and an all-reduce that must give back its input.
func TestGPUNCCLJoinOneRank(t *testing.T) {
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	id, err := b.NewCommID()
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	c, err := b.JoinComm(id, 1, 0)
	require.NoError(t, err)
	in := f32s(4096, 5)
	h := putBytes(t, b, in)
	out := putBytes(t, b, make([]byte, len(in)))
	require.NoError(t, c.AllReduce(h, out, core.DataFloat32, core.ReduceSum))
	require.True(t, bytesEqual(in, getBytes(t, b, out)), "one-rank all-reduce is the identity")
	require.NoError(t, c.Close())
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Free(out))
}

func TestGPUMultiDevicePeerCopyBothWays(t *testing.T) {
	g := openAllGPUs(t, 2)
	a, b := g.Backends()[0], g.Backends()[1]
	const n = 256 << 20
	d0, d1 := pattern(n, 1), pattern(n, 2)
	x := putBytes(t, a, d0)
	y := putBytes(t, b, d1)
	xs := putBytes(t, b, make([]byte, n))
	ys := putBytes(t, a, make([]byte, n))
	require.NoError(t, core.CopyPeer(b, a, []core.PeerCopy{{Dst: xs, Src: x, Len: n}}))
	require.NoError(t, core.CopyPeer(a, b, []core.PeerCopy{{Dst: ys, Src: y, Len: n}}))
	require.True(t, bytesEqual(d0, getBytes(t, b, xs)), "0 -> 1")
	require.True(t, bytesEqual(d1, getBytes(t, a, ys)), "1 -> 0")
}

// TestGPUMultiDeviceAllReduce1GiB all-reduces 1 GiB of float32 per device
// and checks every element against the sum computed here.
func TestGPUMultiDeviceAllReduce1GiB(t *testing.T) {
	g := openAllGPUs(t, 2)
	n := g.Len()
	const count = 1 << 28 // 1 GiB of float32
	bufs := make([]core.Buffer, n)
	for r := 0; r < n; r++ {
		bufs[r] = putBytes(t, g.Backends()[r], f32s(count, r))
	}
	err := g.AllReduce(bufs, bufs, core.DataFloat32, core.ReduceSum)
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	for r := 0; r < n; r++ {
		got := getBytes(t, g.Backends()[r], bufs[r])
		for i := 0; i < count; i++ {
			var want float32
			for k := 0; k < n; k++ {
				want += float32((i*7 + k*3) % 1000)
			}
			if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != want {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, v, want)
			}
		}
	}
}

// rawCopy times the same copy through the driver directly, on a stream of
// its own: cuMemcpyDtoDAsync within one device, cuMemcpyPeerAsync between
// two, then one cuStreamSynchronize.
func rawCopy(b *testing.B, dstDev, srcDev int, dst, src uint64, n uint64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := func(ord int) cudaapi.Context {
		dev, err := cudaapi.DeviceGet(int32(ord))
		require.NoError(b, err)
		c, err := cudaapi.DevicePrimaryCtxRetain(dev)
		require.NoError(b, err)
		b.Cleanup(func() { _ = cudaapi.DevicePrimaryCtxRelease(dev) })
		return c
	}
	dctx, sctx := ctx(dstDev), ctx(srcDev)
	require.NoError(b, cudaapi.CtxSetCurrent(dctx))
	if dstDev != srcDev {
		if err := cudaapi.CtxEnablePeerAccess(sctx, 0); err != nil && !errors.Is(err, cudaapi.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
			b.Logf("peer access not enabled (%v): the raw copy is staged by the driver", err)
		}
	}
	s, err := cudaapi.StreamCreate(1)
	require.NoError(b, err)
	defer cudaapi.StreamDestroy(s)
	b.SetBytes(int64(n))
	b.ResetTimer()
	for range b.N {
		if dstDev == srcDev {
			err = cudaapi.MemcpyDtoDAsync(cudaapi.DevicePtr(dst), cudaapi.DevicePtr(src), n, s)
		} else {
			err = cudaapi.MemcpyPeerAsync(cudaapi.DevicePtr(dst), dctx, cudaapi.DevicePtr(src), sctx, n, s)
		}
		if err == nil {
			err = cudaapi.StreamSynchronize(s)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchPeer(b *testing.B, dst, src *core.Backend, dstDev, srcDev int) {
	for _, n := range []int{16 << 20, 256 << 20} {
		sb, err := src.Alloc(n)
		require.NoError(b, err)
		db, err := dst.Alloc(n)
		require.NoError(b, err)
		sp, _ := src.ResidentDevicePtr(sb)
		dp, _ := dst.ResidentDevicePtr(db)
		copies := []core.PeerCopy{{Dst: db, Src: sb, Len: n}}
		b.Run(fmt.Sprintf("%dMiB/CopyPeer", n>>20), func(b *testing.B) {
			// One copy first, as rawCopy sets up its stream and peer access
			// before its timer: leases, events and peer access are made once.
			require.NoError(b, core.CopyPeer(dst, src, copies))
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				if err := core.CopyPeer(dst, src, copies); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%dMiB/raw", n>>20), func(b *testing.B) { rawCopy(b, dstDev, srcDev, dp, sp, uint64(n)) })
		require.NoError(b, src.Free(sb))
		require.NoError(b, dst.Free(db))
	}
}

// BenchmarkGPUPeerCopySameDevice compares CopyPeer between two Backends of
// device 0 with cuMemcpyDtoDAsync of the same bytes, in one run.
func BenchmarkGPUPeerCopySameDevice(b *testing.B) {
	a, c := openGPUPair(b)
	benchPeer(b, c, a, 0, 0)
}

// BenchmarkGPUPeerCopyMultiDevice compares CopyPeer from device 0 to 1
// with cuMemcpyPeerAsync of the same bytes.
func BenchmarkGPUPeerCopyMultiDevice(b *testing.B) {
	g := openAllGPUs(b, 2)
	benchPeer(b, g.Backends()[1], g.Backends()[0], 1, 0)
}

// BenchmarkGPUAllReduce reports NCCL's bus bandwidth (2(n-1)/n x bytes per
// second, as nccl-tests and PyTorch's benchmarks count it) for in-place
// float32 all-reduces of 256 MiB per device. Compare with
// scripts/bench_multi_torch.py run in the same command.
func BenchmarkGPUAllReduce(b *testing.B) {
	g := openAllGPUs(b, 1)
	n := g.Len()
	const size = 256 << 20
	bufs := make([]core.Buffer, n)
	for r := range bufs {
		h, err := g.Backends()[r].Alloc(size)
		require.NoError(b, err)
		bufs[r] = h
	}
	if err := g.AllReduce(bufs, bufs, core.DataFloat32, core.ReduceSum); err != nil { // builds the communicators
		if errors.Is(err, core.ErrUnsupported) {
			b.Skipf("NCCL unavailable: %v", err)
		}
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		if err := g.AllReduce(bufs, bufs, core.DataFloat32, core.ReduceSum); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*float64(n-1)/float64(n)*size/sec/1e9, "busGB/s")
	b.ReportMetric(size/sec/1e9, "algGB/s")
}
