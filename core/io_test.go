package core_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// ioFixture is a Backend with three resident buffers of different sizes
// holding known random bytes.
type ioFixture struct {
	b    *core.Backend
	dev  *sim.Device
	bufs []core.Buffer
	want [][]byte // the model: what each buffer must hold
	bad  map[string]core.Buffer
}

func newIOFixture(t *testing.T) *ioFixture {
	t.Helper()
	b, dev := openSim(t, sim.Config{})
	f := &ioFixture{b: b, dev: dev}
	r := rand.New(rand.NewSource(42))
	for _, n := range []int{64, 100, 4096} {
		h, err := b.Alloc(n)
		require.NoError(t, err)
		f.bufs = append(f.bufs, h)
		f.want = append(f.want, randomBytes(r, n))
	}
	ups := make([]core.UploadAt, len(f.bufs))
	for i := range ups {
		ups[i] = core.UploadAt{Buf: f.bufs[i], Data: f.want[i]}
	}
	require.NoError(t, b.Upload(ups...))
	f.bad = badHandles(t, b, f.bufs[0])
	b.ResetTelemetry()
	return f
}

// device reads buffer i straight from the simulated device, bypassing the
// Backend so the check itself moves no counters.
func (f *ioFixture) device(t *testing.T, i int) []byte {
	t.Helper()
	ptr, err := f.b.ResidentDevicePtr(f.bufs[i])
	require.NoError(t, err)
	got, err := f.dev.ReadDevice(ptr, f.bufs[i].Len)
	require.NoError(t, err)
	return got
}

// requireModel asserts every buffer holds what the model says.
func (f *ioFixture) requireModel(t *testing.T) {
	t.Helper()
	for i := range f.bufs {
		require.True(t, bytes.Equal(f.want[i], f.device(t, i)), "buffer %d differs from the model", i)
	}
}

// refused runs a call that must fail with sentinel naming numbers, and
// asserts it changed nothing: no driver call, no telemetry, same bytes.
func (f *ioFixture) refused(t *testing.T, call func() error, sentinel error, numbers ...any) {
	t.Helper()
	calls, tel, resident := f.dev.CallCounts(), f.b.Telemetry(), f.b.MemoryStats().Allocated
	err := call()
	requireKind(t, err, sentinel, numbers...)
	assert.Equal(t, calls, f.dev.CallCounts(), "a refused call makes no driver call")
	assert.Equal(t, tel, f.b.Telemetry())
	assert.Equal(t, resident, f.b.MemoryStats().Allocated)
	f.requireModel(t)
}

func TestUploadRefusals(t *testing.T) {
	f := newIOFixture(t)
	h0, h1 := f.bufs[0], f.bufs[1]
	good0, good1 := make([]byte, 64), make([]byte, 100)
	type tc struct {
		name     string
		call     func() error
		sentinel error
		numbers  []any
	}
	cases := []tc{
		{"full short", func() error { return core.UploadSlice(f.b, h0, make([]byte, 63)) }, core.ErrInvalidArgument, []any{"exactly 64 bytes but got 63"}},
		{"full long", func() error { return core.UploadSlice(f.b, h0, make([]byte, 65)) }, core.ErrInvalidArgument, []any{"got 65"}},
		{"full nil", func() error { return core.UploadSlice(f.b, h0, []byte(nil)) }, core.ErrInvalidArgument, []any{"got 0"}},
		{"long", func() error { return f.b.Upload(core.UploadAt{Buf: h0, Data: make([]byte, 65)}) }, core.ErrInvalidArgument, []any{"65 bytes at offset 0", "its 64 bytes"}},
		{"many: bad length at item 2", func() error {
			return f.b.Upload(core.UploadAt{Buf: h0, Data: good0}, core.UploadAt{Buf: h1, Data: good1}, core.UploadAt{Buf: h1, Data: make([]byte, 101)})
		}, core.ErrInvalidArgument, []any{"item 2", h1.ID, 101, 100}},
		{"many: unknown handle at item 1", func() error {
			return f.b.Upload(core.UploadAt{Buf: h0, Data: good0}, core.UploadAt{Buf: core.Buffer{ID: 1 << 60, Len: 100}, Data: good1})
		}, core.ErrUnknownHandle, []any{"item 1", uint64(1 << 60)}},
		{"at negative offset", func() error { return f.b.Upload(core.UploadAt{Buf: h0, Offset: -1, Data: []byte{1}}) }, core.ErrInvalidArgument, []any{-1}},
		{"at past end", func() error { return f.b.Upload(core.UploadAt{Buf: h0, Offset: 60, Data: make([]byte, 5)}) }, core.ErrInvalidArgument, []any{"5 bytes at offset 60", "its 64 bytes"}},
		{"at empty past end", func() error { return f.b.Upload(core.UploadAt{Buf: h0, Offset: 65, Data: nil}) }, core.ErrInvalidArgument, []any{"offset 65"}},
		{"at overflow", func() error { return f.b.Upload(core.UploadAt{Buf: h0, Offset: math.MaxInt, Data: []byte{1}}) }, core.ErrInvalidArgument, []any{math.MaxInt}},
		{"at many: bad item 1", func() error {
			return f.b.Upload(core.UploadAt{Buf: h0, Offset: 0, Data: good0}, core.UploadAt{Buf: h1, Offset: 99, Data: []byte{1, 2}})
		}, core.ErrInvalidArgument, []any{"item 1", "2 bytes at offset 99"}},
	}
	for name, h := range f.bad {
		cases = append(cases,
			tc{"full " + name, func() error { return f.b.Upload(core.UploadAt{Buf: h, Data: make([]byte, max(h.Len, 0))}) }, core.ErrUnknownHandle, []any{h.ID}},
			tc{"many " + name, func() error {
				return f.b.Upload(core.UploadAt{Buf: h0, Data: good0}, core.UploadAt{Buf: h, Data: make([]byte, max(h.Len, 0))})
			}, core.ErrUnknownHandle, []any{"item 1", h.ID}},
			tc{"at " + name, func() error { return f.b.Upload(core.UploadAt{Buf: h, Offset: 0, Data: []byte{1}}) }, core.ErrUnknownHandle, []any{h.ID}},
			tc{"at many " + name, func() error {
				return f.b.Upload(core.UploadAt{Buf: h, Offset: 0, Data: nil})
			}, core.ErrUnknownHandle, []any{h.ID}},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { f.refused(t, c.call, c.sentinel, c.numbers...) })
	}
}

func TestReadbackRefusalsPreserveOutputs(t *testing.T) {
	f := newIOFixture(t)
	h0, h1 := f.bufs[0], f.bufs[1]
	keep := []byte("caller bytes")
	dst := [][]byte{keep, nil}
	type tc struct {
		name     string
		call     func() error
		sentinel error
		numbers  []any
	}
	check1 := func(got []byte, err error) error {
		assert.Equal(t, "caller bytes", string(got), "a failed Into call returns dst unchanged")
		return err
	}
	check2 := func(got [][]byte, err error) error {
		require.Len(t, got, 2)
		assert.Same(t, &dst[0][0], &got[0][0])
		assert.Equal(t, "caller bytes", string(got[0]))
		assert.Nil(t, got[1])
		return err
	}
	cases := []tc{
		{"range negative offset", func() error { _, err := f.b.Download(h0.Slice(-1, 1), nil); return err }, core.ErrInvalidArgument, []any{-1}},
		{"range negative length", func() error { _, err := f.b.Download(h0.Slice(0, -5), nil); return err }, core.ErrInvalidArgument, []any{-5}},
		{"range past end", func() error { _, err := f.b.Download(h0.Slice(60, 5), nil); return err }, core.ErrInvalidArgument, []any{"5 bytes at offset 60", "its 64 bytes"}},
		{"range empty past end", func() error { _, err := f.b.Download(h0.Slice(65, 0), nil); return err }, core.ErrInvalidArgument, []any{"offset 65"}},
		{"range overflow", func() error { _, err := f.b.Download(h0.Slice(math.MaxInt, 1), nil); return err }, core.ErrInvalidArgument, []any{math.MaxInt}},
		{"ranges into: bad item 1", func() error {
			return check2(f.b.DownloadMany([]core.Range{{h0, 0, 64}, {h1, 50, 51}}, dst))
		}, core.ErrInvalidArgument, []any{"item 1", "51 bytes at offset 50", "its 100 bytes"}},
		{"ranges into: bad whole range 1", func() error {
			return check2(f.b.DownloadMany([]core.Range{h0.Slice(0, 1), h1.Slice(0, 101)}, dst))
		}, core.ErrInvalidArgument, []any{"item 1", "101 bytes"}},
	}
	for name, h := range f.bad {
		cases = append(cases,
			tc{"full " + name, func() error { _, err := f.b.Download(h.All(), nil); return err }, core.ErrUnknownHandle, []any{h.ID}},
			tc{"into " + name, func() error { return check1(f.b.Download(h.All(), keep)) }, core.ErrUnknownHandle, []any{h.ID}},
			tc{"many " + name, func() error { _, err := f.b.DownloadMany(allOf([]core.Buffer{h0, h}), nil); return err }, core.ErrUnknownHandle, []any{"item 1", h.ID}},
			tc{"many into " + name, func() error {
				return check2(f.b.DownloadMany(allOf([]core.Buffer{h0, h}), dst))
			}, core.ErrUnknownHandle, []any{"item 1", h.ID}},
			tc{"range " + name, func() error { _, err := f.b.Download(h.Slice(0, 0), nil); return err }, core.ErrUnknownHandle, []any{h.ID}},
			tc{"ranges into " + name, func() error {
				return check2(f.b.DownloadMany([]core.Range{{h, 0, 0}}, dst))
			}, core.ErrUnknownHandle, []any{h.ID}},
			tc{"ranges into, second " + name, func() error {
				return check2(f.b.DownloadMany([]core.Range{h0.Slice(0, 1), h.Slice(0, 0)}, dst))
			}, core.ErrUnknownHandle, []any{"item 1", h.ID}},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { f.refused(t, c.call, c.sentinel, c.numbers...) })
	}
	assert.Equal(t, "caller bytes", string(keep))
}

func TestUploadsMatchModel(t *testing.T) {
	f := newIOFixture(t)
	r := rand.New(rand.NewSource(7))
	for round := range 50 {
		var ups []core.UploadAt
		for range 1 + r.Intn(8) {
			i := r.Intn(len(f.bufs))
			n := f.bufs[i].Len
			off := r.Intn(n + 1)
			data := randomBytes(r, r.Intn(n-off+1))
			ups = append(ups, core.UploadAt{Buf: f.bufs[i], Offset: off, Data: data})
			copy(f.want[i][off:], data) // later uploads win, as if applied in order
		}
		require.NoError(t, f.b.Upload(ups...), "round %d", round)
		f.requireModel(t)
	}
}

func TestReadbacksMatchModel(t *testing.T) {
	f := newIOFixture(t)
	r := rand.New(rand.NewSource(9))
	got, err := f.b.DownloadMany(allOf(f.bufs), nil)
	require.NoError(t, err)
	assert.Equal(t, f.want, got)
	for i, h := range f.bufs {
		one, err := f.b.Download(h.All(), nil)
		require.NoError(t, err)
		assert.Equal(t, f.want[i], one)
	}
	var all []core.Range
	var dst [][]byte
	for round := range 50 {
		var rs []core.Range
		for range r.Intn(8) {
			i := r.Intn(len(f.bufs))
			off := r.Intn(f.bufs[i].Len + 1)
			rs = append(rs, core.Range{Buf: f.bufs[i], Offset: off, Len: r.Intn(f.bufs[i].Len - off + 1)})
		}
		dst, err = f.b.DownloadMany(rs, dst)
		require.NoError(t, err)
		require.Len(t, dst, len(rs))
		for j, rg := range rs {
			i := indexOf(f.bufs, rg.Buf)
			require.Equal(t, f.want[i][rg.Offset:rg.Offset+rg.Len], nonNil(dst[j]), "round %d range %d", round, j)
		}
		all = append(all, rs...)
	}
	// Every round's ranges at once, into new slices: one fence for all.
	out, err := f.b.DownloadMany(all, nil)
	require.NoError(t, err)
	require.Len(t, out, len(all))
	for j, rg := range all {
		i := indexOf(f.bufs, rg.Buf)
		require.Equal(t, f.want[i][rg.Offset:rg.Offset+rg.Len], out[j])
		require.Equal(t, len(out[j]), cap(out[j]), "a new slice's capacity is its length")
	}
}

func indexOf(bufs []core.Buffer, h core.Buffer) int {
	for i, b := range bufs {
		if b == h {
			return i
		}
	}
	return -1
}

func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

func TestIntoCallsReuseCapacity(t *testing.T) {
	f := newIOFixture(t)
	h0, h1 := f.bufs[0], f.bufs[1]
	dst := make([]byte, 3, 256)
	got, err := f.b.Download(h0.All(), dst)
	require.NoError(t, err)
	assert.Equal(t, f.want[0], got)
	assert.Same(t, &dst[:1][0], &got[0], "the capacity of dst is reused")

	slots := make([][]byte, 1, 4)
	slots[0] = make([]byte, 0, 128)
	inner := &slots[0][:1][0]
	out, err := f.b.DownloadMany(allOf([]core.Buffer{h1, h0}), slots)
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.Same(t, &slots[0], &out[0], "the outer capacity is reused")
	assert.Same(t, inner, &out[0][0], "slot 0's capacity is reused")
	assert.Equal(t, f.want[1], out[0])
	assert.Equal(t, f.want[0], out[1])

	// Growing: fewer slots than requests still works, and existing slots
	// are carried over.
	grown, err := f.b.DownloadMany([]core.Range{{h0, 1, 2}, {h1, 0, 3}, {h0, 0, 0}}, out[:1])
	require.NoError(t, err)
	require.Len(t, grown, 3)
	assert.Equal(t, f.want[0][1:3], grown[0])
	assert.Equal(t, f.want[1][:3], grown[1])
	assert.Empty(t, grown[2])
}

func TestZeroLengthReadsTouchNothing(t *testing.T) {
	f := newIOFixture(t)
	h0, h1 := f.bufs[0], f.bufs[1]
	calls := f.dev.CallCounts()
	got, err := f.b.Download(h0.Slice(0, 0), nil)
	require.NoError(t, err)
	assert.NotNil(t, got)
	assert.Empty(t, got)
	got, err = f.b.Download(h0.Slice(64, 0), nil)
	require.NoError(t, err)
	assert.Empty(t, got)

	rs, err := f.b.DownloadMany([]core.Range{{h0, 3, 0}, {h1, 100, 0}}, [][]byte{[]byte("x")})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Empty(t, rs[0])
	assert.Empty(t, rs[1])

	fresh, err := f.b.DownloadMany([]core.Range{h1.Slice(5, 0)}, nil)
	require.NoError(t, err)
	require.Len(t, fresh, 1)
	assert.NotNil(t, fresh[0], "a new slice, even of nothing")
	assert.Empty(t, fresh[0])

	many, err := f.b.DownloadMany(allOf(nil), nil)
	require.NoError(t, err)
	assert.Empty(t, many)
	require.NoError(t, f.b.Upload(core.UploadAt{Buf: h0, Offset: 64, Data: nil}))
	require.NoError(t, f.b.Upload(core.UploadAt{Buf: h0, Offset: 1, Data: nil}, core.UploadAt{Buf: h1, Offset: 0, Data: []byte{}}))
	require.NoError(t, f.b.Upload(nil...))

	assert.Equal(t, calls, f.dev.CallCounts(), "zero-length work makes no driver call at all")
	assert.Equal(t, core.Telemetry{}, f.b.Telemetry())
}

func TestOneSyncPerBatch(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	// Fewer copies than the packed path starts at, so each is its own driver
	// copy (packed_test.go covers batches that are packed).
	const n, size = 8, 100
	r := rand.New(rand.NewSource(3))
	bufs := make([]core.Buffer, n)
	ups := make([]core.UploadAt, n)
	for i := range bufs {
		h, err := b.Alloc(size)
		require.NoError(t, err)
		bufs[i] = h
		ups[i] = core.UploadAt{Buf: h, Data: randomBytes(r, size)}
	}
	syncs, h2d, d2h := dev.Calls(sim.OpStreamSynchronize), dev.Calls(sim.OpMemcpyHtoDAsync), dev.Calls(sim.OpMemcpyDtoHAsync)
	require.NoError(t, b.Upload(ups...))
	assert.Equal(t, syncs+1, dev.Calls(sim.OpStreamSynchronize))
	assert.Equal(t, h2d+n, dev.Calls(sim.OpMemcpyHtoDAsync))
	assert.Equal(t, core.Telemetry{HostToDeviceBytes: n * size, UploadOps: 1, SyncPoints: 1,
		ResidentAllocationBytes: n * size, RequestedCopies: n, DeviceCopies: n}, b.Telemetry())

	b.ResetTelemetry()
	got, err := b.DownloadMany(allOf(bufs), nil)
	require.NoError(t, err)
	for i := range got {
		require.Equal(t, ups[i].Data, got[i])
	}
	assert.Equal(t, syncs+2, dev.Calls(sim.OpStreamSynchronize))
	assert.Equal(t, d2h+n, dev.Calls(sim.OpMemcpyDtoHAsync))
	assert.Equal(t, core.Telemetry{DeviceToHostBytes: n * size, ReadbackOps: 1, SyncPoints: 1,
		RequestedCopies: n, DeviceCopies: n}, b.Telemetry())
	assert.Zero(t, dev.Calls(sim.OpEventSynchronize))
}

func TestFusedCopyCounts(t *testing.T) {
	f := newIOFixture(t)
	h0, h1 := f.bufs[0], f.bufs[1]
	h2d := f.dev.Calls(sim.OpMemcpyHtoDAsync)
	// Four touching pieces of h0 and one piece of h1: two device copies.
	ups := []core.UploadAt{
		{h0, 0, bytes.Repeat([]byte{1}, 16)},
		{h0, 16, bytes.Repeat([]byte{2}, 16)},
		{h0, 40, bytes.Repeat([]byte{4}, 24)},
		{h0, 30, bytes.Repeat([]byte{3}, 10)}, // overlaps piece 2, touches piece 3
		{h1, 0, bytes.Repeat([]byte{5}, 10)},
	}
	require.NoError(t, f.b.Upload(ups...))
	assert.Equal(t, h2d+2, f.dev.Calls(sim.OpMemcpyHtoDAsync))
	tel := f.b.Telemetry()
	assert.Equal(t, uint64(5), tel.RequestedCopies)
	assert.Equal(t, uint64(2), tel.DeviceCopies)
	assert.Equal(t, uint64(64+10), tel.HostToDeviceBytes, "overlapping bytes move once")
	for _, u := range ups {
		i := indexOf(f.bufs, u.Buf)
		copy(f.want[i][u.Offset:], u.Data)
	}
	f.requireModel(t)

	f.b.ResetTelemetry()
	d2h := f.dev.Calls(sim.OpMemcpyDtoHAsync)
	rs := []core.Range{{h0, 0, 10}, {h0, 5, 20}, {h0, 25, 5}, {h1, 0, 4}, {h1, 50, 4}, {h0, 0, 0}}
	out, err := f.b.DownloadMany(rs, nil)
	require.NoError(t, err)
	assert.Equal(t, d2h+3, f.dev.Calls(sim.OpMemcpyDtoHAsync), "h0's ranges union into one copy; h1's two stay apart")
	tel = f.b.Telemetry()
	assert.Equal(t, uint64(5), tel.RequestedCopies)
	assert.Equal(t, uint64(3), tel.DeviceCopies)
	assert.Equal(t, uint64(30+4+4), tel.DeviceToHostBytes)
	for j, rg := range rs {
		i := indexOf(f.bufs, rg.Buf)
		assert.Equal(t, f.want[i][rg.Offset:rg.Offset+rg.Len], nonNil(out[j]), fmt.Sprint(j))
	}
}
