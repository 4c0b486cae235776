package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The reference's static cache test: a cold acquisition uploads each payload
// once with one fence, a warm one uploads nothing, and Close releases the
// cached buffers.
func TestStaticCacheWarmAcquisitionUploadsNothing(t *testing.T) {
	b, _ := openSim(t, sim.Config{}, core.WithResidentPoolLimit(0))
	base := b.MemoryStats().Allocated
	a, c := bytes.Repeat([]byte{0xA5}, 256), bytes.Repeat([]byte{0x5A}, 512)
	const domain = 0x4355_4441_5354_4154
	d, err := core.NewOptimizerDispatcher(b, core.WithStaticCacheCap(768*4))
	require.NoError(t, err)

	b.ResetTelemetry()
	cold, err := d.AcquireStaticUploads(domain, [][]byte{a, c})
	require.NoError(t, err)
	assert.False(t, cold.CacheHit)
	assert.True(t, cold.Cached)
	require.Len(t, cold.Bufs, 2)
	require.NoError(t, d.ReleaseStaticUploads(cold))
	tel := b.Telemetry()
	assert.Equal(t, uint64(768), tel.HostToDeviceBytes, "each payload uploaded exactly once")
	assert.Equal(t, uint64(1), tel.UploadOps, "one batch")
	assert.Equal(t, uint64(1), tel.SyncPoints, "one fence")
	assert.Equal(t, uint64(768), tel.ResidentAllocationBytes)

	b.ResetTelemetry()
	warm, err := d.AcquireStaticUploads(domain, [][]byte{a, c})
	require.NoError(t, err)
	assert.True(t, warm.CacheHit)
	assert.True(t, warm.Cached)
	assert.Equal(t, cold.Bufs, warm.Bufs)
	assert.Equal(t, cold.Bufs, warm.Bufs)
	assert.Equal(t, core.Telemetry{}, b.Telemetry(), "a warm acquisition touches nothing")
	got, err := b.DownloadMany(allOf(warm.Bufs), nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{a, c}, got)
	require.NoError(t, d.ReleaseStaticUploads(warm))
	assert.Equal(t, core.OptimizerStats{StaticEntries: 1, StaticCachedBytes: 768, StaticCap: 768 * 4,
		PoolCap: b.DeviceInfo().TotalMemory / 32}, d.Stats())

	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
}

func TestStaticCacheKeySeparatesEveryInput(t *testing.T) {
	ab, c := []byte("ab"), []byte("c")
	base := core.StaticCacheKeyForTest(1, 9, [][]byte{ab, c})
	assert.Equal(t, base, core.StaticCacheKeyForTest(1, 9, [][]byte{[]byte("ab"), []byte("c")}), "content, not identity")
	for name, k := range map[string][32]byte{
		"domain":      core.StaticCacheKeyForTest(2, 9, [][]byte{ab, c}),
		"feature key": core.StaticCacheKeyForTest(1, 8, [][]byte{ab, c}),
		"split":       core.StaticCacheKeyForTest(1, 9, [][]byte{[]byte("a"), []byte("bc")}),
		"joined":      core.StaticCacheKeyForTest(1, 9, [][]byte{[]byte("abc")}),
		"order":       core.StaticCacheKeyForTest(1, 9, [][]byte{c, ab}),
		"byte":        core.StaticCacheKeyForTest(1, 9, [][]byte{[]byte("ab"), []byte("d")}),
	} {
		assert.NotEqual(t, base, k, name)
	}

	// Through the dispatcher: another domain is another entry.
	d, b, _ := openOpt(t)
	first, err := d.AcquireStaticUploads(1, [][]byte{ab, c})
	require.NoError(t, err)
	b.ResetTelemetry()
	second, err := d.AcquireStaticUploads(2, [][]byte{ab, c})
	require.NoError(t, err)
	assert.False(t, second.CacheHit)
	assert.Equal(t, uint64(3), b.Telemetry().HostToDeviceBytes)
	assert.NotEqual(t, first.Bufs, second.Bufs)
	require.NoError(t, d.ReleaseStaticUploads(first))
	require.NoError(t, d.ReleaseStaticUploads(second))
}

// acquire is AcquireStaticUploads of one payload of n bytes of value v.
func acquire(t *testing.T, d *core.OptimizerDispatcher, v byte, n int) core.StaticSet {
	t.Helper()
	s, err := d.AcquireStaticUploads(uint64(v), [][]byte{bytes.Repeat([]byte{v}, n)})
	require.NoError(t, err)
	return s
}

func TestStaticCacheEvictsLargestUnreferencedFirst(t *testing.T) {
	d, b, _ := openOpt(t, core.WithStaticCacheCap(1000), core.WithOptimizerPoolCap(0))
	held := acquire(t, d, 1, 400) // stays referenced
	for _, s := range []core.StaticSet{acquire(t, d, 2, 300), acquire(t, d, 3, 200)} {
		require.NoError(t, d.ReleaseStaticUploads(s))
	}
	require.Equal(t, uint64(900), d.Stats().StaticCachedBytes)

	// 900+300 > 1000: the 300-byte set goes first, which is enough.
	resident := b.MemoryStats().Allocated
	s4 := acquire(t, d, 4, 300)
	assert.True(t, s4.Cached)
	assert.Equal(t, uint64(900), d.Stats().StaticCachedBytes)
	assert.Equal(t, resident, b.MemoryStats().Allocated, "300 in, 300 out")
	b.ResetTelemetry()
	warm3 := acquire(t, d, 3, 200)
	assert.True(t, warm3.CacheHit, "the smaller set survived")
	cold2 := acquire(t, d, 2, 300)
	assert.False(t, cold2.CacheHit, "the larger one was evicted")
	// 900+300: nothing unreferenced is left to evict, so it is uncached.
	assert.False(t, cold2.Cached)
	assert.Equal(t, 3, d.Stats().StaticEntries)

	for _, s := range []core.StaticSet{held, s4, warm3, cold2} {
		require.NoError(t, d.ReleaseStaticUploads(s))
	}
	// Referenced entries are evicted only once released: now all three are
	// unreferenced, and a 1000-byte set evicts every one of them.
	big := acquire(t, d, 5, 1000)
	assert.True(t, big.Cached)
	assert.Equal(t, core.OptimizerStats{StaticEntries: 1, StaticCachedBytes: 1000, StaticCap: 1000,
		StaticSetsAcquired: 1}, d.Stats())
	require.NoError(t, d.ReleaseStaticUploads(big))
}

// When evicting everything evictable would still not make room, nothing is
// evicted.
func TestStaticCacheEvictsNothingWhenRoomCannotBeMade(t *testing.T) {
	d, _, _ := openOpt(t, core.WithStaticCacheCap(1000))
	held := acquire(t, d, 1, 600)
	require.NoError(t, d.ReleaseStaticUploads(acquire(t, d, 2, 300)))
	s := acquire(t, d, 3, 500) // would need 400 evicted; only 300 is evictable
	assert.False(t, s.Cached)
	assert.Equal(t, 2, d.Stats().StaticEntries)
	assert.Equal(t, uint64(900), d.Stats().StaticCachedBytes)
	require.NoError(t, d.ReleaseStaticUploads(s))
	require.NoError(t, d.ReleaseStaticUploads(held))
}

func TestStaticOverCapSetIsFreedOnRelease(t *testing.T) {
	d, b, dev := openOpt(t, core.WithStaticCacheCap(100), core.WithOptimizerPoolCap(4096))
	base := b.MemoryStats().Allocated
	s := acquire(t, d, 7, 200)
	assert.False(t, s.Cached)
	assert.Zero(t, d.Stats().StaticEntries)
	assert.Equal(t, base+200, b.MemoryStats().Allocated)
	require.NoError(t, d.ReleaseStaticUploads(s))
	assert.Equal(t, []int{200}, core.OptimizerPooledLensForTest(d), "released through the free pool")
	_, err := b.Download(s.Bufs[0].All(), nil)
	require.ErrorIs(t, err, core.ErrUnknownHandle)

	allocs := dev.Calls(sim.OpMemAlloc)
	b.ResetTelemetry()
	again := acquire(t, d, 7, 200)
	assert.False(t, again.CacheHit, "never cached, so uploaded again")
	assert.Equal(t, uint64(200), b.Telemetry().HostToDeviceBytes)
	assert.Equal(t, allocs, dev.Calls(sim.OpMemAlloc), "into the pooled buffer")
	require.NoError(t, d.ReleaseStaticUploads(again))
}

func TestStaticReleaseRefusals(t *testing.T) {
	d, b, _ := openOpt(t, core.WithStaticCacheCap(100))
	cached := acquire(t, d, 1, 10)
	uncached := acquire(t, d, 2, 200)
	other, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	foreign, err := other.AcquireStaticUploads(1, [][]byte{bytes.Repeat([]byte{1}, 10)})
	require.NoError(t, err)

	// An uncached set in use cannot be released.
	_, release, err := core.PinForTest(b, uncached.Bufs)
	require.NoError(t, err)
	require.ErrorIs(t, d.ReleaseStaticUploads(uncached), core.ErrInFlight)
	release()

	require.NoError(t, d.ReleaseStaticUploads(cached))
	require.NoError(t, d.ReleaseStaticUploads(uncached))
	stats := d.Stats()
	for name, s := range map[string]core.StaticSet{
		"twice (cached)":   cached,
		"twice (uncached)": uncached,
		"zero":             {},
		"foreign":          foreign,
	} {
		err := d.ReleaseStaticUploads(s)
		require.ErrorIs(t, err, core.ErrUnknownHandle, name)
		assert.Contains(t, err.Error(), "Fix: ", name)
	}
	assert.Equal(t, stats, d.Stats())
	require.NoError(t, other.ReleaseStaticUploads(foreign))
}

// Static buffers are immutable: every path that writes them from the host
// or by memset refuses with ErrOwned and moves nothing, and the dispatcher's
// Free refuses them; kernels may read them.
func TestStaticBuffersAreReadOnly(t *testing.T) {
	d, b, dev := openOpt(t)
	payload := bytes.Repeat([]byte{3, 0, 0, 0}, 64)
	s, err := d.AcquireStaticUploads(1, [][]byte{payload})
	require.NoError(t, err)
	id := s.Bufs[0]
	out := allocBufs(t, d, len(payload))[0]

	require.ErrorIs(t, d.Free(id), core.ErrInvalidArgument)
	pb, err := b.AllocHostPinned(len(payload))
	require.NoError(t, err)
	calls, tel := dev.CallCounts(), b.Telemetry()
	writes := map[string]func() error{
		"Upload": func() error { return b.Upload(core.UploadAt{Buf: id, Data: payload}) },
		"Upload, second item": func() error {
			return b.Upload(core.UploadAt{Buf: out, Data: payload}, core.UploadAt{Buf: id, Offset: 4, Data: payload[:4]})
		},
		"empty Upload":  func() error { return b.Upload(core.UploadAt{Buf: id}) },
		"UploadSlice":   func() error { return core.UploadSlice(b, id, payload) },
		"UploadSliceAt": func() error { return core.UploadSliceAt(b, id, 1, []uint32{7}) },
		"UploadAsync":   func() error { return b.UploadAsync(core.UploadAt{Buf: id, Data: pb.Bytes()}) },
		"Run clear":     func() error { _, err := b.Run(core.Batch{Clears: []core.Buffer{id}}, nil); return err },
		"Run fill":      func() error { _, err := b.Run(core.Batch{Fills: []core.Fill{{Buf: id, Value: 1}}}, nil); return err },
		"Run upload": func() error {
			_, err := b.Run(core.Batch{Uploads: []core.UploadAt{{Buf: id, Data: payload}}}, nil)
			return err
		},
		"RunAsync upload": func() error {
			_, err := b.RunAsync(core.Batch{Uploads: []core.UploadAt{{Buf: id, Data: payload}}})
			return err
		},
		"Capture fill": func() error { _, err := b.Capture(core.Batch{Fills: []core.Fill{{Buf: id, Value: 1}}}); return err },
	}
	for name, write := range writes {
		err := write()
		requireKind(t, err, core.ErrOwned, id.ID, "static upload set")
		assert.Equal(t, calls, dev.CallCounts(), name)
		assert.Equal(t, tel, b.Telemetry(), name)
	}
	require.NoError(t, pb.Free())

	// Bound as a kernel input and read back, it works.
	res, err := b.Run(core.Batch{
		Clears: []core.Buffer{out},
		Steps:  []core.Step{{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{id, id, out}}},
		Reads:  []core.Range{{Buf: out, Len: len(payload)}, {Buf: id, Len: len(payload)}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{6, 0, 0, 0}, 64), res[0])
	assert.Equal(t, payload, res[1])
	require.NoError(t, d.ReleaseStaticUploads(s))
}

func TestStaticRejectsBadPayloads(t *testing.T) {
	d, _, dev := openOpt(t)
	for name, p := range map[string][][]byte{
		"nil":           nil,
		"empty list":    {},
		"empty payload": {{1}, {}},
	} {
		calls := dev.CallCounts()
		_, err := d.AcquireStaticUploads(1, p)
		require.ErrorIs(t, err, core.ErrInvalidArgument, name)
		assert.Equal(t, calls, dev.CallCounts(), name)
	}
	_, err := d.AcquireStaticUploads(1, [][]byte{{1}, {}})
	assert.Contains(t, err.Error(), "payload 1 of 2")
}

// A cached set that work still uses is not evicted even when unreferenced.
func TestStaticCacheSkipsInFlightEntries(t *testing.T) {
	d, b, _ := openOpt(t, core.WithStaticCacheCap(500))
	s := acquire(t, d, 1, 400)
	require.NoError(t, d.ReleaseStaticUploads(s))
	_, release, err := core.PinForTest(b, s.Bufs)
	require.NoError(t, err)
	next := acquire(t, d, 2, 400)
	assert.False(t, next.Cached, "the in-flight entry stayed")
	release()
	require.NoError(t, d.ReleaseStaticUploads(next))
	again := acquire(t, d, 2, 400)
	assert.True(t, again.Cached, "now the idle entry makes room")
	require.NoError(t, d.ReleaseStaticUploads(again))
}

// A cold acquisition that takes a pooled buffer, then fails with a drain
// that fails too, leaves the buffer to the Backend's quarantine: its queued
// copy may still write into it. The dispatcher must not pool it again (a
// later Alloc would hand it out while the copy is pending); it is
// retired and freed once the quarantine drains.
func TestStaticFailedDrainDoesNotPoolQuarantinedBuffer(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, core.WithResidentPoolLimit(0))
	base := b.MemoryStats().Allocated
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	const n = 512
	id, err := d.Alloc(n)
	require.NoError(t, err)
	pooledPtr, err := b.ResidentDevicePtr(id)
	require.NoError(t, err)
	require.NoError(t, d.Free(id))
	require.Equal(t, 1, d.Stats().PooledBuffers)

	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED) // the upload's fence
	dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED) // and its drain
	_, err = d.AcquireStaticUploads(7, [][]byte{bytes.Repeat([]byte{0xC3}, n)})
	require.ErrorIs(t, err, core.ErrDriver)
	require.Equal(t, 1, b.LaunchResourceCounts().Quarantined, "the failed upload's stream is quarantined")
	st := d.Stats()
	assert.Equal(t, 0, st.PooledBuffers, "a buffer the quarantine holds is not pooled again")
	assert.Equal(t, 1, st.RetiredBuffers)

	dev.ClearFaults()
	again, err := d.Alloc(n)
	require.NoError(t, err)
	ptr, err := b.ResidentDevicePtr(again)
	require.NoError(t, err)
	assert.NotEqual(t, pooledPtr, ptr, "the quarantined buffer's memory is not handed out again")
	require.NoError(t, d.Free(again))
	require.NoError(t, d.Close())
	assert.Equal(t, base, b.MemoryStats().Allocated)
}

// A static set's buffers are refused as the destination of a peer copy and
// as the receive buffer of a collective, and serve as their sources.
func TestStaticBuffersRefusePeerAndCollectiveWrites(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	b0, b1 := g.Backends()[0], g.Backends()[1]
	d, err := core.NewOptimizerDispatcher(b0)
	require.NoError(t, err)
	payload := f32Bytes([]float32{1, 2, 3, 4})
	set, err := d.AcquireStaticUploads(9, [][]byte{payload})
	require.NoError(t, err)
	static := set.Bufs[0]
	plain := putBytes(t, b0, make([]byte, 16))
	other := putBytes(t, b1, f32Bytes([]float32{10, 20, 30, 40}))

	require.NoError(t, core.CopyPeer(b1, b0, []core.PeerCopy{{Dst: other, Src: static, Len: 16}}), "a static buffer is a source")
	require.NoError(t, g.AllReduce([]core.Buffer{static, other}, []core.Buffer{plain, other}, core.DataFloat32, core.ReduceSum))
	assert.Equal(t, f32Bytes([]float32{2, 4, 6, 8}), getBytes(t, b0, plain))

	calls := m.Device(0).CallCounts()
	err = core.CopyPeer(b0, b1, []core.PeerCopy{{Dst: static, Src: other, Len: 16}})
	requireKind(t, err, core.ErrOwned, "copy 0 destination", static.ID)
	err = g.AllReduce([]core.Buffer{plain, other}, []core.Buffer{static, other}, core.DataFloat32, core.ReduceSum)
	requireKind(t, err, core.ErrOwned, "rank 0 recv", static.ID)
	assert.Equal(t, calls, m.Device(0).CallCounts(), "nothing reached the device")
	assert.Equal(t, payload, getBytes(t, b0, static))
	require.NoError(t, d.ReleaseStaticUploads(set))
	require.NoError(t, d.Close())
	require.NoError(t, b0.Free(plain))
	require.NoError(t, b1.Free(other))
}
