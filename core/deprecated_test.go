package core_test

//lint:file-ignore SA1019 this file checks that the deprecated names delegate to the new verbs

import (
	"bytes"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// sameError asserts that old, returned by the deprecated wrapper op, is
// the error its new verb returned (new): the same kind, detail, fix, driver
// code and cause, with op, the name called, as its Op.
func sameError(t *testing.T, op string, old, new error) {
	t.Helper()
	var eo, en *core.Error
	require.ErrorAs(t, old, &eo, op)
	require.ErrorAs(t, new, &en, op)
	want := *en
	want.Op = op
	assert.Equal(t, &want, eo, op)
}

// depFixture is a Backend with two buffers of known bytes.
type depFixture struct {
	b    *core.Backend
	h    []core.Buffer
	want [][]byte
}

func newDepFixture(t *testing.T) *depFixture {
	t.Helper()
	b, _ := openSim(t, sim.Config{})
	f := &depFixture{b: b}
	r := rand.New(rand.NewSource(11))
	for _, n := range []int{64, 300} {
		h, err := b.Alloc(n)
		require.NoError(t, err)
		f.h, f.want = append(f.h, h), append(f.want, randomBytes(r, n))
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: f.want[len(f.want)-1]}))
	}
	t.Cleanup(func() {
		for _, h := range f.h {
			assert.NoError(t, b.Free(h))
		}
	})
	return f
}

// read returns the whole of buffer i as the device holds it.
func (f *depFixture) read(t *testing.T, i int) []byte {
	t.Helper()
	got, err := f.b.Download(f.h[i].All(), nil)
	require.NoError(t, err)
	return got
}

func TestDeprecatedAllocAndFreeDelegate(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.AllocateResident(40)
	require.NoError(t, err)
	assert.Equal(t, 40, h.Len)
	_, errNew := b.Alloc(0)
	_, errOld := b.AllocateResident(0)
	sameError(t, "AllocateResident", errOld, errNew)

	p, err := b.DispatchAsync(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
	require.NoError(t, err)
	sameError(t, "FreeResident", b.FreeResident(h), b.Free(h))
	require.NoError(t, p.Await())
	require.NoError(t, b.FreeResident(h))
	sameError(t, "FreeResident", b.FreeResident(h), b.Free(h))

	var nilB *core.Backend
	_, errOld = nilB.AllocateResident(1)
	_, errNew = nilB.Alloc(1)
	sameError(t, "AllocateResident", errOld, errNew)
}

func TestDeprecatedUploadsDelegate(t *testing.T) {
	f := newDepFixture(t)
	b, h0, h1 := f.b, f.h[0], f.h[1]
	data := bytes.Repeat([]byte{7}, 64)

	require.NoError(t, b.UploadResident(h0, data))
	assert.Equal(t, data, f.read(t, 0))
	sameError(t, "UploadResident", b.UploadResident(h0, data[:10]), core.UploadSlice(b, h0, data[:10]))

	require.NoError(t, b.UploadResidentAt(h1, 5, []byte{1, 2, 3}))
	copy(f.want[1][5:], []byte{1, 2, 3})
	assert.Equal(t, f.want[1], f.read(t, 1))
	sameError(t, "UploadResidentAt", b.UploadResidentAt(h1, 299, data[:2]),
		b.Upload(core.UploadAt{Buf: h1, Offset: 299, Data: data[:2]}))

	ups := []core.UploadAt{{Buf: h0, Offset: 1, Data: []byte{9}}, {Buf: h1, Data: []byte{8, 8}}}
	require.NoError(t, b.UploadResidentAtMany(ups))
	data[1], f.want[1][0], f.want[1][1] = 9, 8, 8
	assert.Equal(t, data, f.read(t, 0))
	assert.Equal(t, f.want[1], f.read(t, 1))
	bad := []core.UploadAt{ups[0], {Buf: h1, Offset: -1, Data: []byte{1}}}
	sameError(t, "UploadResidentAtMany", b.UploadResidentAtMany(bad), b.Upload(bad...))

	whole := bytes.Repeat([]byte{5}, 300)
	require.NoError(t, b.UploadResidentMany([]core.Upload{{Buf: h0, Data: data}, {Buf: h1, Data: whole}}))
	assert.Equal(t, whole, f.read(t, 1))
	err := b.UploadResidentMany([]core.Upload{{Buf: h0, Data: data}, {Buf: h1, Data: whole[:299]}})
	requireKind(t, err, core.ErrInvalidArgument, "UploadResidentMany", "item 1", "needs exactly 300 bytes but got 299")
	assert.Equal(t, whole, f.read(t, 1), "a refused whole-buffer upload wrote nothing")

	var nilB *core.Backend
	sameError(t, "UploadResident", nilB.UploadResident(h0, data), core.UploadSlice(nilB, h0, data))
	sameError(t, "UploadResidentMany", nilB.UploadResidentMany(nil), nilB.Upload())
}

func TestDeprecatedAsyncUploadDelegates(t *testing.T) {
	f := newDepFixture(t)
	b, h := f.b, f.h[1]
	p, err := b.AllocHostPinned(16)
	require.NoError(t, err)
	copy(p.Bytes(), "sixteen bytes!!!")
	require.NoError(t, b.UploadResidentAsyncAt(h, 100, p.Pointer(), 16))
	requireKind(t, b.Free(h), core.ErrInFlight, h.ID)
	require.NoError(t, b.SynchronizeUploads())
	assert.Equal(t, "sixteen bytes!!!", string(f.read(t, 1)[100:116]))

	sameError(t, "UploadResidentAsyncAt", b.UploadResidentAsyncAt(h, 290, p.Pointer(), 16),
		b.UploadAsync(core.UploadAt{Buf: h, Offset: 290, Data: p.Bytes()}))
	sameError(t, "UploadResidentAsyncAt", b.UploadResidentAsyncAt(core.Buffer{ID: 1 << 61, Len: 300}, 0, p.Pointer(), 16),
		b.UploadAsync(core.UploadAt{Buf: core.Buffer{ID: 1 << 61, Len: 300}, Data: p.Bytes()}))
	pageable := make([]byte, 16)
	err = b.UploadResidentAsyncAt(h, 0, unsafe.Pointer(&pageable[0]), 16)
	requireKind(t, err, core.ErrInvalidArgument, "UploadResidentAsyncAt", "not inside memory pinned")
	requireKind(t, b.UploadResidentAsyncAt(h, 0, p.Pointer(), -1), core.ErrInvalidArgument, "UploadResidentAsyncAt", -1)
	requireKind(t, b.UploadResidentAsyncAt(h, 0, nil, 4), core.ErrInvalidArgument, "UploadResidentAsyncAt", "nil")
	require.NoError(t, b.UploadResidentAsyncAt(h, 0, nil, 0), "nothing queues nothing")
	assert.Zero(t, b.LaunchResourceCounts().Leases, "no refusal queued anything")
	require.NoError(t, p.Free())
}

func TestDeprecatedSingleDownloadsDelegate(t *testing.T) {
	f := newDepFixture(t)
	b, h0, h1 := f.b, f.h[0], f.h[1]
	unknown := core.Buffer{ID: 1 << 61, Len: 64}

	got, err := b.DownloadResident(h1)
	require.NoError(t, err)
	assert.Equal(t, f.want[1], got)
	_, errOld := b.DownloadResident(unknown)
	_, errNew := b.Download(unknown.All(), nil)
	sameError(t, "DownloadResident", errOld, errNew)

	dst := make([]byte, 0, 64)
	got, err = b.DownloadResidentInto(h0, dst)
	require.NoError(t, err)
	assert.Equal(t, f.want[0], got)
	assert.Same(t, &dst[:1][0], &got[0], "dst's storage is reused")
	keep := []byte("keep")
	out, errOld := b.DownloadResidentInto(unknown, keep)
	assert.Equal(t, "keep", string(out))
	_, errNew = b.Download(unknown.All(), keep)
	sameError(t, "DownloadResidentInto", errOld, errNew)

	got, err = b.DownloadResidentRange(h1, 10, 20)
	require.NoError(t, err)
	assert.Equal(t, f.want[1][10:30], got)
	got, err = b.DownloadResidentRange(h1, 300, 0)
	require.NoError(t, err)
	assert.NotNil(t, got, "an empty range reads into a new, empty slice")
	assert.Empty(t, got)
	_, errOld = b.DownloadResidentRange(h1, 290, 20)
	_, errNew = b.Download(h1.Slice(290, 20), nil)
	sameError(t, "DownloadResidentRange", errOld, errNew)
}

func TestDeprecatedManyDownloadsDelegate(t *testing.T) {
	f := newDepFixture(t)
	b, h0, h1 := f.b, f.h[0], f.h[1]
	unknown := core.Buffer{ID: 1 << 61, Len: 64}

	got, err := b.DownloadResidentMany([]core.Buffer{h1, h0})
	require.NoError(t, err)
	assert.Equal(t, [][]byte{f.want[1], f.want[0]}, got)
	assert.Equal(t, len(got[0]), cap(got[0]), "new slices, each its own")
	_, errOld := b.DownloadResidentMany([]core.Buffer{h0, unknown})
	_, errNew := b.DownloadMany([]core.Range{h0.All(), unknown.All()}, nil)
	sameError(t, "DownloadResidentMany", errOld, errNew)

	dst := [][]byte{make([]byte, 0, 64)}
	got, err = b.DownloadResidentManyInto([]core.Buffer{h0, h1}, dst)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{f.want[0], f.want[1]}, got)
	assert.Same(t, &dst[0][:1][0], &got[0][0], "slot 0's storage is reused")
	_, errOld = b.DownloadResidentManyInto([]core.Buffer{unknown}, dst)
	_, errNew = b.DownloadMany([]core.Range{unknown.All()}, dst)
	sameError(t, "DownloadResidentManyInto", errOld, errNew)

	rs := []core.Range{h1.Slice(3, 4), h0.Slice(0, 0), h1.Slice(299, 1)}
	got, err = b.DownloadResidentRangesInto(rs, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{f.want[1][3:7], {}, f.want[1][299:]}, got)
	bad := append(rs, h0.Slice(60, 5))
	_, errOld = b.DownloadResidentRangesInto(bad, dst)
	_, errNew = b.DownloadMany(bad, dst)
	sameError(t, "DownloadResidentRangesInto", errOld, errNew)
}

func TestDeprecatedBatchesIntoDelegates(t *testing.T) {
	f := newDepFixture(t)
	b, h0, h1 := f.b, f.h[0], f.h[1]
	batches := [][]core.Range{{h1.Slice(0, 5)}, nil, {h0.Slice(2, 3), h1.Slice(299, 1)}}
	flat, err := b.DownloadMany([]core.Range{h1.Slice(0, 5), h0.Slice(2, 3), h1.Slice(299, 1)}, nil)
	require.NoError(t, err)

	got, err := b.DownloadResidentBatchesInto(batches, nil)
	require.NoError(t, err)
	assert.Equal(t, [][][]byte{{flat[0]}, nil, {flat[1], flat[2]}}, got)

	slot := make([]byte, 0, 8)
	dst := [][][]byte{nil, nil, {nil, slot}}
	got, err = b.DownloadResidentBatchesInto(batches, dst)
	require.NoError(t, err)
	assert.Equal(t, [][][]byte{{flat[0]}, nil, {flat[1], flat[2]}}, got)
	assert.Same(t, &dst[0], &got[0], "the outer storage is reused")
	assert.Same(t, &slot[:1][0], &got[2][1][0], "batch 2's slot 1 storage is reused")

	keep := [][][]byte{{[]byte("keep")}}
	bad := [][]core.Range{{h0.Slice(0, 1)}, {h1.Slice(0, 301)}}
	out, errOld := b.DownloadResidentBatchesInto(bad, keep)
	assert.Equal(t, "keep", string(out[0][0]), "a failed call returns dst unchanged")
	_, errNew := b.DownloadMany([]core.Range{h0.Slice(0, 1), h1.Slice(0, 301)}, nil)
	sameError(t, "DownloadResidentBatchesInto", errOld, errNew)
}

func TestDeprecatedDispatchDelegates(t *testing.T) {
	f := newDepFixture(t)
	b, h0 := f.b, f.h[0]
	fill := core.ProgramFillU32()
	require.NoError(t, b.DispatchResident(fill, []core.Buffer{h0}, core.DispatchConfig{Scalars: []uint32{0x03030303}}))
	assert.Equal(t, bytes.Repeat([]byte{3}, 64), f.read(t, 0))
	p, err := b.DispatchResidentAsync(fill, []core.Buffer{h0}, core.DispatchConfig{Scalars: []uint32{0x04040404}, Timing: true})
	require.NoError(t, err)
	require.NoError(t, p.Await())
	assert.Equal(t, bytes.Repeat([]byte{4}, 64), f.read(t, 0))

	sameError(t, "DispatchResident", b.DispatchResident(fill, []core.Buffer{h0}, core.DispatchConfig{}),
		b.Dispatch(fill, []core.Buffer{h0}, core.DispatchConfig{}))
	_, errOld := b.DispatchResidentAsync(fill, nil, core.DispatchConfig{})
	_, errNew := b.DispatchAsync(fill, nil, core.DispatchConfig{})
	sameError(t, "DispatchResidentAsync", errOld, errNew)
}

func TestDeprecatedDispatcherCallsDelegate(t *testing.T) {
	d, b, _ := openOpt(t)
	id, err := d.AllocResident(64)
	require.NoError(t, err)
	h, err := d.Buffer(id)
	require.NoError(t, err)
	assert.Equal(t, core.Buffer{ID: id, Len: 64}, h, "an id is its Buffer's handle id")
	other, err := d.Alloc(16)
	require.NoError(t, err)
	_, errOld := d.AllocResident(-1)
	_, errNew := d.Alloc(-1)
	sameError(t, "AllocResident", errOld, errNew)

	data := bytes.Repeat([]byte{6}, 64)
	require.NoError(t, d.UploadResident(id, data))
	got, err := d.ReadResident(id)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	sameError(t, "UploadResident", d.UploadResident(id, data[:3]), core.UploadSlice(b, h, data[:3]))
	require.NoError(t, d.UploadResidentMany([]core.OptUpload{{ID: id, Data: data}, {ID: other.ID, Data: data[:16]}}))
	require.NoError(t, d.UploadResidentAtMany([]core.OptUploadAt{{ID: id, Offset: 60, Data: []byte{1, 2, 3, 4}}}))
	bad := []core.OptUploadAt{{ID: id, Offset: 62, Data: []byte{1, 2, 3}}}
	sameError(t, "UploadResidentAtMany", d.UploadResidentAtMany(bad),
		b.Upload(core.UploadAt{Buf: h, Offset: 62, Data: []byte{1, 2, 3}}))

	many, err := d.ReadResidentMany([]uint64{other.ID, id})
	require.NoError(t, err)
	want, err := b.DownloadMany([]core.Range{other.All(), h.All()}, nil)
	require.NoError(t, err)
	assert.Equal(t, want, many)
	ranges, err := d.ReadResidentRanges([]core.OptRange{{ID: id, Offset: 60, Len: 4}}, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{1, 2, 3, 4}}, ranges)
	_, errOld = d.ReadResidentRanges([]core.OptRange{{ID: id, Offset: 61, Len: 4}}, nil)
	_, errNew = b.DownloadMany([]core.Range{h.Slice(61, 4)}, nil)
	sameError(t, "ReadResidentRanges", errOld, errNew)
	_, err = d.ReadResident(1 << 61)
	requireKind(t, err, core.ErrUnknownHandle, "ReadResident", "id 2305843009213693952")

	batch := core.OptBatch{Fills: []core.OptFill{{ID: id, Value: 2}},
		Steps: []core.OptStep{{Program: core.ProgramCopyU32(), IDs: []uint64{id, other.ID}}},
		Reads: []core.OptRange{{ID: other.ID, Len: 16}}}
	out, err := d.Run(batch, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{bytes.Repeat([]byte{2}, 16)}, out)
	g, err := d.Capture(batch)
	require.NoError(t, err)
	replayed, err := g.Replay(nil)
	require.NoError(t, err)
	assert.Equal(t, out, replayed)
	require.NoError(t, g.Close())

	require.NoError(t, d.FreeResident(id))
	sameError(t, "FreeResident", d.FreeResident(other.ID+1<<40), d.Free(core.Buffer{ID: other.ID + 1<<40}))
	_, err = d.Buffer(id)
	requireKind(t, err, core.ErrUnknownHandle, "Buffer", id)
	require.NoError(t, d.Free(other))
}

// The static set's IDs name its Bufs, and a static buffer refuses writes
// through the deprecated calls as through the new ones.
func TestDeprecatedStaticIDs(t *testing.T) {
	d, b, _ := openOpt(t)
	set, err := d.AcquireStaticUploads(3, [][]byte{{1, 2, 3, 4}, {5, 6}})
	require.NoError(t, err)
	require.Len(t, set.IDs, 2)
	for i, h := range set.Bufs {
		assert.Equal(t, h.ID, set.IDs[i])
	}
	sameError(t, "UploadResident", d.UploadResident(set.IDs[1], []byte{9, 9}), core.UploadSlice(b, set.Bufs[1], []byte{9, 9}))
	_, errOld := d.Run(core.OptBatch{Clears: []uint64{set.IDs[0]}}, nil)
	requireKind(t, errOld, core.ErrOwned, "clear 0")
	got, err := d.ReadResident(set.IDs[0])
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3, 4}, got)
	require.NoError(t, d.ReleaseStaticUploads(set))
}

// Nil receivers report the deprecated name called.
func TestDeprecatedNilReceivers(t *testing.T) {
	var b *core.Backend
	var d *core.OptimizerDispatcher
	_, errOld := b.DownloadResidentBatchesInto(nil, nil)
	_, errNew := b.DownloadMany(nil, nil)
	sameError(t, "DownloadResidentBatchesInto", errOld, errNew)
	_, errOld = d.AllocResident(1)
	_, errNew = d.Alloc(1)
	sameError(t, "AllocResident", errOld, errNew)
	sameError(t, "FreeResident", d.FreeResident(1), d.Free(core.Buffer{ID: 1}))
	_, err := d.Run(core.OptBatch{}, nil)
	requireKind(t, err, core.ErrInvalidArgument, "Run")
	_, err = d.Capture(core.OptBatch{})
	requireKind(t, err, core.ErrInvalidArgument, "Capture")
	requireKind(t, d.UploadResidentMany(nil), core.ErrInvalidArgument, "UploadResidentMany")
	_, err = d.ReadResidentMany(nil)
	requireKind(t, err, core.ErrInvalidArgument, "ReadResidentMany")
}

// The deprecated read-outs delegate to DeviceInfo and MemoryStats.
func TestDeprecatedMemoryReadOutsDelegate(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: 1 << 20})
	keep, err := b.Alloc(3000)
	require.NoError(t, err)
	gone, err := b.Alloc(5000)
	require.NoError(t, err)
	require.NoError(t, b.Free(gone))
	_, err = b.Download(keep.All(), nil)
	require.NoError(t, err)

	st := b.MemoryStats()
	require.Equal(t, uint64(3000), st.Allocated)
	require.NotZero(t, st.CachedDevice, "the freed buffer's block is cached")
	assert.Equal(t, st.Allocated, b.ResidentAllocatedBytes())
	dc, pc := b.PoolCachedBytes()
	assert.Equal(t, st.CachedDevice, dc)
	assert.Equal(t, st.CachedPinned, pc)
	assert.Equal(t, uint64(1<<20), b.DeviceMemoryBytes())

	var none *core.Backend
	dc, pc = none.PoolCachedBytes()
	assert.Zero(t, none.DeviceMemoryBytes()+none.ResidentAllocatedBytes()+dc+pc)
}
