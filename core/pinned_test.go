package core_test

import (
	"math"
	"math/rand"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestAllocHostPinned(t *testing.T) {
	t.Run("bad sizes", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{})
		for _, n := range []int{0, -1, math.MinInt} {
			p, err := b.AllocHostPinned(n)
			requireKind(t, err, core.ErrInvalidArgument, n)
			assert.Nil(t, p)
		}
		assert.Zero(t, dev.Calls(sim.OpHostAlloc))
	})
	t.Run("driver failure and null success", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{})
		dev.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
		_, err := b.AllocHostPinned(64)
		requireKind(t, err, core.ErrDriver, "HostAlloc")
		dev.NullNth(sim.OpHostAlloc, 1)
		_, err = b.AllocHostPinned(64)
		requireKind(t, err, core.ErrDriver, "null")
		assert.Zero(t, dev.Live().PinnedBuffers)
	})
	t.Run("fill, free, refuse a second free", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{})
		p, err := b.AllocHostPinned(100)
		require.NoError(t, err)
		require.Len(t, p.Bytes(), 100)
		assert.Equal(t, 100, p.Len())
		assert.Equal(t, 1, dev.Live().PinnedBuffers)
		dev.FailNth(sim.OpHostFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		requireKind(t, p.Free(), core.ErrDriver)
		assert.Len(t, p.Bytes(), 100, "a failed free keeps the buffer")
		require.NoError(t, p.Free())
		assert.Nil(t, p.Bytes())
		requireKind(t, p.Free(), core.ErrUnknownHandle, "already freed")
		assert.Zero(t, dev.Live().PinnedBuffers)
	})
}

func TestUploadAsync(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(256)
	require.NoError(t, err)
	p, err := b.AllocHostPinned(128)
	require.NoError(t, err)
	data := randomBytes(rand.New(rand.NewSource(5)), 128)
	copy(p.Bytes(), data)

	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Offset: 100, Data: p.Bytes()}))
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: p.Bytes()[28:128]}))
	assert.Equal(t, 1, b.LaunchResourceCounts().Leases, "queued on one backend-owned stream")
	assert.Equal(t, 1, dev.Live().Streams)

	requireKind(t, b.Free(h), core.ErrInFlight, h.ID)
	requireKind(t, p.Free(), core.ErrInFlight, "2 queued")
	requireKind(t, b.Close(), core.ErrInFlight, "2 asynchronous")

	syncs := dev.Calls(sim.OpStreamSynchronize)
	require.NoError(t, b.SynchronizeUploads())
	assert.Equal(t, syncs+1, dev.Calls(sim.OpStreamSynchronize))
	assert.Zero(t, b.LaunchResourceCounts().Leases)
	require.NoError(t, b.SynchronizeUploads(), "nothing queued: returns at once")
	assert.Equal(t, syncs+1, dev.Calls(sim.OpStreamSynchronize))

	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, data[28:], got[:100])
	assert.Equal(t, data, got[100:228])
	tel := b.Telemetry()
	assert.Equal(t, uint64(228+256), tel.HostToDeviceBytes+tel.DeviceToHostBytes)
	require.NoError(t, p.Free())
	require.NoError(t, b.Free(h))
}

func TestUploadAsyncRefusals(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	p, err := b.AllocHostPinned(32)
	require.NoError(t, err)
	pageable := make([]byte, 32)
	mem := make([]byte, 64)
	require.NoError(t, b.PinHostBuffer(unsafe.Pointer(&mem[0]), 32))
	src := p.Bytes()
	cases := []struct {
		name     string
		ups      []core.UploadAt
		sentinel error
		numbers  []any
	}{
		{"negative offset", []core.UploadAt{{Buf: h, Offset: -1, Data: src[:1]}}, core.ErrInvalidArgument, []any{-1}},
		{"past end", []core.UploadAt{{Buf: h, Offset: 60, Data: src[:5]}}, core.ErrInvalidArgument, []any{"5 bytes at offset 60"}},
		{"offset overflow", []core.UploadAt{{Buf: h, Offset: math.MaxInt, Data: src[:1]}}, core.ErrInvalidArgument, []any{math.MaxInt}},
		{"pageable source", []core.UploadAt{{Buf: h, Data: pageable}}, core.ErrInvalidArgument, []any{"not inside memory pinned"}},
		{"source runs past pinned memory", []core.UploadAt{{Buf: h, Data: mem[31:33]}}, core.ErrInvalidArgument, []any{"+2"}},
		{"unknown handle", []core.UploadAt{{Buf: core.Buffer{ID: 1 << 62, Len: 64}, Data: src[:1]}}, core.ErrUnknownHandle, []any{uint64(1 << 62)}},
		{"drifted handle", []core.UploadAt{{Buf: core.Buffer{ID: h.ID, Len: 65}, Data: src[:1]}}, core.ErrUnknownHandle, []any{65}},
		{"second item pageable", []core.UploadAt{{Buf: h, Data: src}, {Buf: h, Offset: 32, Data: pageable}}, core.ErrInvalidArgument, []any{"item 1", "not inside memory pinned"}},
		{"second item past end", []core.UploadAt{{Buf: h, Data: src}, {Buf: h, Offset: 40, Data: src}}, core.ErrInvalidArgument, []any{"item 1", "32 bytes at offset 40"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, tel := dev.CallCounts(), b.Telemetry()
			err := b.UploadAsync(c.ups...)
			requireKind(t, err, c.sentinel, c.numbers...)
			assert.Equal(t, calls, dev.CallCounts())
			assert.Equal(t, tel, b.Telemetry())
			assert.Zero(t, b.LaunchResourceCounts().Leases)
		})
	}
	calls := dev.CallCounts()
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Offset: 64, Data: nil}), "zero bytes queue nothing")
	assert.Equal(t, calls, dev.CallCounts())
	require.NoError(t, b.Free(h), "no refusal left the handle in flight")
	require.NoError(t, p.Free(), "no refusal left the source pending")
	require.NoError(t, b.UnpinHostBuffer(unsafe.Pointer(&mem[0])), "no refusal left the registered memory pending")
	runtime.KeepAlive(pageable)
	runtime.KeepAlive(mem)
}

func TestUploadAsyncDriverFailures(t *testing.T) {
	for _, op := range []sim.Op{sim.OpStreamCreate, sim.OpEventCreate, sim.OpMemcpyHtoDAsync} {
		t.Run(op.String(), func(t *testing.T) {
			b, dev := openSim(t, sim.Config{})
			h, err := b.Alloc(64)
			require.NoError(t, err)
			p, err := b.AllocHostPinned(64)
			require.NoError(t, err)
			dev.FailNth(op, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			err = b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: p.Bytes()})
			requireKind(t, err, core.ErrDriver)
			assert.Zero(t, b.LaunchResourceCounts().Leases)
			assert.Zero(t, b.Telemetry().HostToDeviceBytes)
			require.NoError(t, b.Free(h), "the handle is not left in flight")
			require.NoError(t, p.Free(), "the source is not left pending")
		})
	}
	t.Run("synchronize fails, then retried", func(t *testing.T) {
		b, dev := openSim(t, sim.Config{})
		h, err := b.Alloc(64)
		require.NoError(t, err)
		p, err := b.AllocHostPinned(64)
		require.NoError(t, err)
		copy(p.Bytes(), "async bytes")
		require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: p.Bytes()}))
		dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		requireKind(t, b.SynchronizeUploads(), core.ErrDriver)
		requireKind(t, b.Free(h), core.ErrInFlight, "1 unfinished call") // still queued after the failed wait
		require.NoError(t, b.SynchronizeUploads())
		got, err := b.Download(h.Slice(0, 11), nil)
		require.NoError(t, err)
		assert.Equal(t, "async bytes", string(got))
	})
}

func TestPinHostBuffer(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	mem := make([]byte, 4096)
	copy(mem, "registered")
	p := unsafe.Pointer(&mem[0])

	requireKind(t, b.PinHostBuffer(nil, 10), core.ErrInvalidArgument, "nil")
	requireKind(t, b.PinHostBuffer(p, 0), core.ErrInvalidArgument, 0)
	requireKind(t, b.PinHostBuffer(p, -4), core.ErrInvalidArgument, -4)
	assert.Zero(t, dev.Calls(sim.OpHostRegister))

	dev.FailNth(sim.OpHostRegister, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	requireKind(t, b.PinHostBuffer(p, len(mem)), core.ErrDriver, "HostRegister")
	requireKind(t, b.UploadAsync(core.UploadAt{Buf: h, Data: mem[:10]}), core.ErrInvalidArgument, "not inside memory pinned")

	require.NoError(t, b.PinHostBuffer(p, len(mem)))
	requireKind(t, b.PinHostBuffer(unsafe.Add(p, 100), 10), core.ErrInvalidArgument, "overlaps")
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Data: mem[:10]}))
	requireKind(t, b.UnpinHostBuffer(p), core.ErrInFlight, "1 queued")
	require.NoError(t, b.SynchronizeUploads())
	got, err := b.Download(h.Slice(0, 10), nil)
	require.NoError(t, err)
	assert.Equal(t, "registered", string(got))

	requireKind(t, b.UnpinHostBuffer(unsafe.Add(p, 1)), core.ErrInvalidArgument, "does not start")
	requireKind(t, b.UnpinHostBuffer(nil), core.ErrInvalidArgument)
	pb, err := b.AllocHostPinned(16)
	require.NoError(t, err)
	requireKind(t, b.UnpinHostBuffer(pb.Pointer()), core.ErrInvalidArgument, "Free method")

	dev.FailNth(sim.OpHostUnregister, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	requireKind(t, b.UnpinHostBuffer(p), core.ErrDriver)
	assert.Equal(t, 1, dev.Live().RegisteredRanges, "a failed unpin keeps the range pinned")
	require.NoError(t, b.UnpinHostBuffer(p))
	assert.Zero(t, dev.Live().RegisteredRanges)
	requireKind(t, b.UnpinHostBuffer(p), core.ErrInvalidArgument)

	// Close unregisters what is still pinned and frees pinned buffers.
	require.NoError(t, b.PinHostBuffer(p, 128))
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
	runtime.KeepAlive(mem)
}

// Several items queue in one call, checked first, with one upload
// operation counted; a driver failure at the second leaves the first
// queued for SynchronizeUploads and the rest not.
func TestUploadAsyncSeveralItems(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(64)
	require.NoError(t, err)
	p, err := b.AllocHostPinned(64)
	require.NoError(t, err)
	copy(p.Bytes(), "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/")
	src := p.Bytes()
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Data: src[:10]}, core.UploadAt{Buf: h, Offset: 10, Data: src[10:20]},
		core.UploadAt{Buf: h, Offset: 20}))
	tel := b.Telemetry()
	assert.Equal(t, uint64(1), tel.UploadOps)
	assert.Equal(t, uint64(20), tel.HostToDeviceBytes)
	assert.Equal(t, uint64(2), dev.Calls(sim.OpMemcpyHtoDAsync))
	require.NoError(t, b.SynchronizeUploads())
	got, err := b.Download(h.Slice(0, 20), nil)
	require.NoError(t, err)
	assert.Equal(t, string(src[:20]), string(got))

	dev.FailNth(sim.OpMemcpyHtoDAsync, 2, cudaapi.CUDA_ERROR_UNKNOWN)
	err = b.UploadAsync(core.UploadAt{Buf: h, Offset: 20, Data: src[20:30]}, core.UploadAt{Buf: h, Offset: 30, Data: src[30:40]},
		core.UploadAt{Buf: h, Offset: 40, Data: src[40:50]})
	requireKind(t, err, core.ErrDriver, "item 1")
	requireKind(t, b.Free(h), core.ErrInFlight, "1 unfinished call") // the first copy is queued
	require.NoError(t, b.SynchronizeUploads())
	got, err = b.Download(h.Slice(20, 30), nil)
	require.NoError(t, err)
	assert.Equal(t, string(src[20:30]), string(got[:10]), "the copy before the failure landed")
	assert.NotEqual(t, string(src[30:40]), string(got[10:20]), "the failed one did not")
	require.NoError(t, p.Free(), "no source left pending")
	require.NoError(t, b.Free(h), "no buffer left in flight")
}
