package sim

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func newMachine(t *testing.T, n int, peer [][]bool) *Machine {
	t.Helper()
	m, err := NewMachine(MachineConfig{Devices: n, Peer: peer})
	require.NoError(t, err)
	return m
}

func TestMachineConfigRefusesBadShapes(t *testing.T) {
	_, err := NewMachine(MachineConfig{Devices: 0})
	assert.ErrorContains(t, err, "0 devices")
	_, err = NewMachine(MachineConfig{Devices: 2, Peer: [][]bool{{true, true}}})
	assert.ErrorContains(t, err, "1 rows for 2 devices")
	_, err = NewMachine(MachineConfig{Devices: 2, Peer: [][]bool{{true, true}, {true}}})
	assert.ErrorContains(t, err, "row 1 has 1 entries")
	m := newMachine(t, 2, nil)
	assert.Nil(t, m.Device(2))
	assert.Nil(t, m.Device(-1))
	assert.Equal(t, 1, m.Device(1).Config().Ordinal)
}

// TestPeerLinkAndAccessFollowTheMatrix: links, enabling and peer copies
// obey the configured matrix, in each direction separately.
func TestPeerLinkAndAccessFollowTheMatrix(t *testing.T) {
	m := newMachine(t, 2, [][]bool{{true, true}, {false, true}})
	d0, d1 := m.Device(0), m.Device(1)
	l, err := d0.PeerLink(d1)
	require.NoError(t, err)
	assert.Equal(t, driver.PeerDirect, l)
	l, err = d1.PeerLink(d0)
	require.NoError(t, err)
	assert.Equal(t, driver.PeerNone, l)
	l, err = d0.PeerLink(d0)
	require.NoError(t, err)
	assert.Equal(t, driver.PeerSame, l)
	_, err = d0.PeerLink(New(Config{}))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_DEVICE, err)

	requireCode(t, cudaapi.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, d1.EnablePeerAccess(d0))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_DEVICE, d0.EnablePeerAccess(d0))

	src := mustAlloc(t, d1, 64)
	require.NoError(t, d1.WriteDevice(src, fill(64, 5)))
	dst := mustAlloc(t, d0, 64)
	s := mustStream(t, d0)
	requireCode(t, cudaapi.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, d0.MemcpyPeerAsync(dst, d1, src, 64, s))
	require.NoError(t, d0.EnablePeerAccess(d1))
	require.NoError(t, d0.EnablePeerAccess(d1), "enabling again is not an error")
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d0.MemcpyPeerAsync(dst, d1, src, 65, s))
	require.NoError(t, d0.MemcpyPeerAsync(dst, d1, src, 64, s))
	got, _ := d0.ReadDevice(dst, 64)
	assert.NotEqual(t, fill(64, 5), got, "lazy: nothing moved before the fence")
	require.NoError(t, d0.StreamSynchronize(s))
	got, _ = d0.ReadDevice(dst, 64)
	assert.Equal(t, fill(64, 5), got)
	require.NoError(t, d0.StreamDestroy(s))
	require.NoError(t, d0.MemFree(dst))
	require.NoError(t, d1.MemFree(src))
	RequireMachineNoLeaks(t, m)
}

// TestPeerWaitOnAnotherDevicesEvent: a stream waits for an event recorded
// on another device of the machine, and copies may use that device's
// pinned memory.
func TestPeerWaitOnAnotherDevicesEvent(t *testing.T) {
	m := newMachine(t, 2, nil)
	d0, d1 := m.Device(0), m.Device(1)
	host := mustPinned(t, d0, 32)
	src := mustAlloc(t, d0, 32)
	dst := mustAlloc(t, d1, 32)
	require.NoError(t, d0.WriteDevice(src, fill(32, 7)))
	s0, s1 := mustStream(t, d0), mustStream(t, d1)
	ev := mustEvent(t, d0, false)
	require.NoError(t, d0.MemcpyDtoHAsync(host, src, s0))
	require.NoError(t, d0.EventRecord(ev, s0))
	require.NoError(t, d1.StreamWaitEvent(s1, ev))
	require.NoError(t, d1.MemcpyHtoDAsync(dst, host, s1)) // d0's pinned memory
	require.NoError(t, d1.StreamSynchronize(s1))          // runs d0's stream first
	got, _ := d1.ReadDevice(dst, 32)
	assert.Equal(t, fill(32, 7), got)
	assert.Zero(t, d0.Live().QueuedOps)
	// A device of another machine can neither wait nor use the memory.
	other := New(Config{})
	so := mustStream(t, other)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, other.StreamWaitEvent(so, ev))
	o := mustAlloc(t, other, 32)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, other.MemcpyHtoDAsync(o, host, so))
}

func TestCollectiveGroupRulesAndMismatch(t *testing.T) {
	m := newMachine(t, 2, nil)
	d0, d1 := m.Device(0), m.Device(1)
	comms, err := d0.NewCommunicators([]driver.Driver{d0, d1})
	require.NoError(t, err)
	_, err = d0.NewCommunicators([]driver.Driver{d0, d0})
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
	_, err = d0.NewCommunicators([]driver.Driver{d1})
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
	assert.Equal(t, 1, d0.Live().Communicators)
	b0, b1 := mustAlloc(t, d0, 16), mustAlloc(t, d1, 16)
	s0, s1 := mustStream(t, d0), mustStream(t, d1)
	// Outside a group, one goroutine driving two ranks would hang.
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, comms[0].AllReduce(b0, b0, 4, driver.DataFloat32, driver.ReduceSum, s0))
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, d0.GroupEnd())
	require.NoError(t, d0.GroupStart())
	require.NoError(t, comms[0].AllReduce(b0, b0, 4, driver.DataFloat32, driver.ReduceSum, s0))
	// Rank 1 calls something else: refused, nothing queued.
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, comms[1].AllReduce(b1, b1, 2, driver.DataFloat32, driver.ReduceSum, s1))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, comms[1].AllReduce(b1, b1, 5, driver.DataFloat32, driver.ReduceSum, s1))
	require.NoError(t, comms[1].AllReduce(b1, b1, 4, driver.DataFloat32, driver.ReduceSum, s1))
	require.NoError(t, d0.GroupEnd())
	require.NoError(t, d1.StreamSynchronize(s1))
	require.NoError(t, d0.StreamSynchronize(s0))
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, comms[0].Destroy())
	assert.Zero(t, d0.Live().Communicators+d1.Live().Communicators)
}

// TestAllReduceAbortReleasesWaitingParts: after an abort, a part whose
// partner never came fails on a rank that did not abort, and executes as a
// no-op on one that did; nothing is written either way.
func TestAllReduceAbortReleasesWaitingParts(t *testing.T) {
	m := newMachine(t, 2, nil)
	d0, d1 := m.Device(0), m.Device(1)
	b0 := mustAlloc(t, d0, 8)
	require.NoError(t, d0.WriteDevice(b0, fill(8, 3)))
	s0 := mustStream(t, d0)
	queue0 := func(c driver.Communicator) {
		require.NoError(t, d0.GroupStart())
		require.NoError(t, c.AllReduce(b0, b0, 2, driver.DataInt32, driver.ReduceSum, s0))
		require.NoError(t, d0.GroupEnd())
	}
	comms, err := d0.NewCommunicators([]driver.Driver{d0, d1})
	require.NoError(t, err)
	queue0(comms[0])
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, d0.StreamSynchronize(s0)) // rank 1 never queued
	queue0(comms[0])
	require.NoError(t, comms[1].Abort())
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, d0.StreamSynchronize(s0)) // rank 1 aborted
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, comms[0].AllReduce(b0, b0, 2, driver.DataInt32, driver.ReduceSum, s0))
	require.NoError(t, comms[0].Abort())

	comms, err = d0.NewCommunicators([]driver.Driver{d0, d1})
	require.NoError(t, err)
	queue0(comms[0])
	require.NoError(t, comms[0].Abort())
	require.NoError(t, comms[1].Abort())
	require.NoError(t, d0.StreamSynchronize(s0)) // abandoned with rank 0: a no-op
	got, _ := d0.ReadDevice(b0, 8)
	assert.Equal(t, fill(8, 3), got)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, comms[0].Destroy())
	assert.Zero(t, d0.Live().Communicators+d1.Live().Communicators)
}

// TestAllReduceEveryTypeAndReduction checks the Go reductions against
// values worked out by hand, per type.
func TestAllReduceEveryTypeAndReduction(t *testing.T) {
	enc := func(dt driver.DataType, vals ...float64) []byte {
		out := make([]byte, dt.Size()*len(vals))
		for i, v := range vals {
			if isFloat(dt) {
				putFloat(dt, out[i*dt.Size():], v)
			} else {
				putInt(dt, out[i*dt.Size():], uint64(int64(v)))
			}
		}
		return out
	}
	type tc struct {
		dt   driver.DataType
		red  driver.ReduceOp
		a, b []float64
		want []float64
	}
	cases := []tc{
		{driver.DataInt8, driver.ReduceSum, []float64{100, -3}, []float64{100, -4}, []float64{-56, -7}}, // wraps
		{driver.DataUint8, driver.ReduceMax, []float64{200, 1}, []float64{100, 2}, []float64{200, 2}},
		{driver.DataInt32, driver.ReduceMin, []float64{-5, 7}, []float64{3, -9}, []float64{-5, -9}},
		{driver.DataUint32, driver.ReduceProd, []float64{70000, 3}, []float64{70000, 5}, []float64{float64(4900000000 % (1 << 32)), 15}},
		{driver.DataInt64, driver.ReduceAvg, []float64{-7, 8}, []float64{2, 8}, []float64{-2, 8}},
		{driver.DataUint64, driver.ReduceSum, []float64{1 << 40, 0}, []float64{1 << 40, 1}, []float64{1 << 41, 1}},
		{driver.DataFloat16, driver.ReduceSum, []float64{1.5, 65504}, []float64{0.25, 0}, []float64{1.75, 65504}},
		{driver.DataBFloat16, driver.ReduceMax, []float64{-2, 3.5}, []float64{-1, 1}, []float64{-1, 3.5}},
		{driver.DataFloat32, driver.ReduceAvg, []float64{1, -3}, []float64{2, 3}, []float64{1.5, 0}},
		{driver.DataFloat64, driver.ReduceProd, []float64{1e200, 2}, []float64{1e200, 0.5}, []float64{math.Inf(1), 1}},
	}
	for _, c := range cases {
		got := reduceBytes(c.dt, c.red, [][]byte{enc(c.dt, c.a...), enc(c.dt, c.b...)})
		assert.Equal(t, enc(c.dt, c.want...), got, "%s %s", c.dt, c.red)
	}
}

// TestHalfConversionRoundTrips: every binary16 value converts to float32
// and back to itself (NaNs stay NaN), and rounding is to nearest even.
func TestHalfConversionRoundTrips(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := halfToFloat(uint16(h))
		back := floatToHalf(f)
		if math.IsNaN(float64(f)) {
			assert.Equal(t, uint16(0x7c00), back&0x7c00, "%#x", h)
			continue
		}
		if back != uint16(h) {
			t.Fatalf("half %#x -> %v -> %#x", h, f, back)
		}
	}
	assert.Equal(t, uint16(0x3c00), floatToHalf(1+1.0/2048))                         // tie: to even (1.0)
	assert.Equal(t, uint16(0x3c02), floatToHalf(1+3.0/2048))                         // tie: to even (1+2/1024)
	assert.Equal(t, uint16(0x7c00), floatToHalf(65520))                              // rounds to infinity
	assert.Equal(t, uint16(0x3f80), floatToBFloat(1.0))                              // bfloat16 1.0
	assert.Equal(t, uint16(0x3f80), floatToBFloat(math.Float32frombits(0x3f808000))) // tie to even
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], 0x3c00)
	assert.Equal(t, 1.0, getFloat(driver.DataFloat16, b[:]))
}
