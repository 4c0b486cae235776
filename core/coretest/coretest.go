// Package coretest is the behavioural conformance suite for driver.Driver
// implementations, run through a core.Backend: the same checks run against
// the simulated device in CI and against a real GPU on a GPU machine.
//
// It owns only tests: it never reaches inside a driver, so everything it
// checks (bytes round-tripped, budgets against the driver's own free-memory
// report, pinned asynchronous uploads, concurrent use, memory given back
// after Close) must hold for any correct Driver.
package coretest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/driver"
)

// Config configures RunWith.
type Config struct {
	// NewDriver returns a fresh driver for one test; it registers any
	// cleanup the driver needs (t.Cleanup) itself.
	NewDriver func(t *testing.T) driver.Driver
	// Options are passed to core.Open.
	Options []core.Option
	// FreeMemory, when set, reports the device's free memory for the leak
	// check in place of the tested driver's MemGetInfo. Set it for drivers a
	// Backend closes in its own Close (core.NewCUDADriver's), reading through
	// a handle that keeps the device context alive for the whole run, or
	// memory leaked inside a released context would go unseen.
	FreeMemory func(t *testing.T) uint64
	// LeakSlack is how many bytes of free device memory a test may end
	// with fewer than it started with, for drivers whose free-memory
	// report moves for reasons of their own. Zero demands an exact match.
	LeakSlack uint64
}

// Run runs the conformance suite over drivers from newDriver, demanding
// that every test give back exactly the device memory it took.
func Run(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	RunWith(t, Config{NewDriver: newDriver})
}

// RunWith runs the conformance suite with cfg.
func RunWith(t *testing.T, cfg Config) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *core.Backend, drv driver.Driver)
	}{
		{"UploadForms", testUploadForms},
		{"ReadbackForms", testReadbackForms},
		{"ZeroLength", testZeroLength},
		{"Budget", testBudget},
		{"Refusals", testRefusals},
		{"PinnedAsync", testPinnedAsync},
		{"Concurrency", testConcurrency},
		{"Memory", testMemory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := cfg.NewDriver(t)
			free := func() uint64 { return mustFree(t, drv) }
			if cfg.FreeMemory != nil {
				free = func() uint64 { return cfg.FreeMemory(t) }
			}
			freeBefore := free()
			b, err := core.Open(drv, cfg.Options...)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer func() {
				if err := b.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
					t.Errorf("Close: %v", err)
				}
				if st := b.MemoryStats(); st.Reserved != 0 || st.ReservedPinned != 0 || st.DeviceAllocs != st.DeviceFrees {
					t.Errorf("Close left memory held: %d device bytes reserved, %d pinned, %d device allocations against %d frees",
						st.Reserved, st.ReservedPinned, st.DeviceAllocs, st.DeviceFrees)
				}
				if freeAfter := free(); freeAfter+cfg.LeakSlack < freeBefore {
					t.Errorf("device memory leaked: %d bytes free before Open, %d after Close", freeBefore, freeAfter)
				}
			}()
			tc.fn(t, b, drv)
		})
	}
}

func mustFree(t *testing.T, drv driver.Driver) uint64 {
	t.Helper()
	free, _, err := drv.MemGetInfo()
	if err != nil {
		t.Fatalf("MemGetInfo: %v", err)
	}
	return free
}

// model is a set of resident buffers and the bytes each must hold.
type model struct {
	t    *testing.T
	b    *core.Backend
	r    *rand.Rand
	bufs []core.Buffer
	want [][]byte
}

func newModel(t *testing.T, b *core.Backend, seed int64, sizes ...int) *model {
	t.Helper()
	m := &model{t: t, b: b, r: rand.New(rand.NewSource(seed))}
	for _, n := range sizes {
		h, err := b.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		m.bufs = append(m.bufs, h)
		m.want = append(m.want, make([]byte, n))
	}
	ups := make([]core.UploadAt, len(m.bufs))
	for i := range ups {
		m.r.Read(m.want[i])
		ups[i] = core.UploadAt{Buf: m.bufs[i], Data: m.want[i]}
	}
	if err := b.Upload(ups...); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	t.Cleanup(func() {
		for _, h := range m.bufs {
			if err := b.Free(h); err != nil && !errors.Is(err, core.ErrClosed) {
				t.Errorf("Free: %v", err)
			}
		}
	})
	return m
}

func (m *model) bytes(n int) []byte {
	p := make([]byte, n)
	m.r.Read(p)
	return p
}

// check reads every buffer back whole and compares with the model.
func (m *model) check(what string) {
	m.t.Helper()
	got, err := m.b.DownloadMany(wholeRanges(m.bufs), nil)
	if err != nil {
		m.t.Fatalf("%s: DownloadMany: %v", what, err)
	}
	for i := range got {
		if !bytes.Equal(got[i], m.want[i]) {
			m.t.Fatalf("%s: buffer %d (%d bytes) differs from what was uploaded", what, i, len(got[i]))
		}
	}
}

func (m *model) randomRange() (int, core.Range) {
	i := m.r.Intn(len(m.bufs))
	n := m.bufs[i].Len
	off := m.r.Intn(n + 1)
	return i, core.Range{Buf: m.bufs[i], Offset: off, Len: m.r.Intn(n - off + 1)}
}

func testUploadForms(t *testing.T, b *core.Backend, _ driver.Driver) {
	m := newModel(t, b, 1, 1, 255, 4096, 70000)
	m.check("Upload of whole buffers")
	for i, h := range m.bufs {
		m.want[i] = m.bytes(h.Len)
		if err := core.UploadSlice(b, h, m.want[i]); err != nil {
			t.Fatalf("UploadSlice: %v", err)
		}
	}
	m.check("UploadSlice")
	for range 20 {
		i, rg := m.randomRange()
		data := m.bytes(rg.Len)
		copy(m.want[i][rg.Offset:], data)
		if err := b.Upload(core.UploadAt{Buf: rg.Buf, Offset: rg.Offset, Data: data}); err != nil {
			t.Fatalf("Upload at an offset: %v", err)
		}
	}
	m.check("Upload at an offset")
	for range 20 {
		var ups []core.UploadAt
		for range 1 + m.r.Intn(10) {
			i, rg := m.randomRange()
			data := m.bytes(rg.Len)
			copy(m.want[i][rg.Offset:], data) // later writes win
			ups = append(ups, core.UploadAt{Buf: rg.Buf, Offset: rg.Offset, Data: data})
		}
		if err := b.Upload(ups...); err != nil {
			t.Fatalf("Upload of several ranges: %v", err)
		}
		m.check("Upload of several ranges")
	}
}

func testReadbackForms(t *testing.T, b *core.Backend, _ driver.Driver) {
	m := newModel(t, b, 2, 3, 1000, 8192, 65537)
	for i, h := range m.bufs {
		got, err := b.Download(h.All(), nil)
		if err != nil || !bytes.Equal(got, m.want[i]) {
			t.Fatalf("Download %d into a new slice: %v", i, err)
		}
		into, err := b.Download(h.All(), make([]byte, 0, 16))
		if err != nil || !bytes.Equal(into, m.want[i]) {
			t.Fatalf("Download %d into a small slice: %v", i, err)
		}
	}
	var slots [][]byte
	var err error
	slots, err = b.DownloadMany(wholeRanges(m.bufs), slots)
	if err != nil {
		t.Fatalf("DownloadMany of whole buffers: %v", err)
	}
	for i := range m.bufs {
		if !bytes.Equal(slots[i], m.want[i]) {
			t.Fatalf("DownloadMany of whole buffers: slot %d differs", i)
		}
	}
	var all []core.Range
	for round := range 20 {
		i, rg := m.randomRange()
		got, err := b.Download(rg.Buf.Slice(rg.Offset, rg.Len), nil)
		if err != nil || !bytes.Equal(got, m.want[i][rg.Offset:rg.Offset+rg.Len]) {
			t.Fatalf("Download of a range, round %d: %v", round, err)
		}
		var rs []core.Range
		var which []int
		for range m.r.Intn(12) {
			i, rg := m.randomRange()
			rs, which = append(rs, rg), append(which, i)
		}
		slots, err = b.DownloadMany(rs, slots)
		if err != nil || len(slots) != len(rs) {
			t.Fatalf("DownloadMany round %d: %v (%d slots for %d ranges)", round, err, len(slots), len(rs))
		}
		for j, rg := range rs {
			if !bytes.Equal(slots[j], m.want[which[j]][rg.Offset:rg.Offset+rg.Len]) {
				t.Fatalf("DownloadMany round %d range %d differs", round, j)
			}
		}
		all = append(all, rs...)
	}
	// Every round's ranges at once, into new slices: one fence for all.
	out, err := b.DownloadMany(all, nil)
	if err != nil || len(out) != len(all) {
		t.Fatalf("DownloadMany of every round's ranges: %v", err)
	}
	for j, rg := range all {
		i := indexOf(m.bufs, rg.Buf)
		if !bytes.Equal(out[j], m.want[i][rg.Offset:rg.Offset+rg.Len]) || cap(out[j]) != len(out[j]) {
			t.Fatalf("DownloadMany of every round's ranges: range %d differs", j)
		}
	}
}

// wholeRanges returns the range of every byte of each buffer, in order.
func wholeRanges(hs []core.Buffer) []core.Range {
	rs := make([]core.Range, len(hs))
	for i, h := range hs {
		rs[i] = h.All()
	}
	return rs
}

func indexOf(bufs []core.Buffer, h core.Buffer) int {
	for i, x := range bufs {
		if x == h {
			return i
		}
	}
	return -1
}

func testZeroLength(t *testing.T, b *core.Backend, _ driver.Driver) {
	m := newModel(t, b, 3, 64)
	h := m.bufs[0]
	before := b.Telemetry()
	got, err := b.Download(h.Slice(64, 0), nil)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("zero-length range: %v, %v", got, err)
	}
	rs, err := b.DownloadMany([]core.Range{{Buf: h}, {Buf: h, Offset: 10}}, nil)
	if err != nil || len(rs) != 2 || len(rs[0])+len(rs[1]) != 0 {
		t.Fatalf("zero-length ranges: %v, %v", rs, err)
	}
	if err := b.Upload(core.UploadAt{Buf: h, Offset: 3, Data: nil}); err != nil {
		t.Fatalf("zero-length upload: %v", err)
	}
	if after := b.Telemetry(); after != before {
		t.Fatalf("zero-length work moved counters: %+v then %+v", before, after)
	}
}

func testBudget(t *testing.T, b *core.Backend, drv driver.Driver) {
	info, err := drv.Info()
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if b.DeviceInfo().TotalMemory != info.TotalMemory {
		t.Fatalf("DeviceInfo().TotalMemory = %d, driver says %d", b.DeviceInfo().TotalMemory, info.TotalMemory)
	}
	// Cached memory is the Backend's own: give it back first, so the
	// driver's free memory is everything the Backend could take.
	if err := b.Trim(); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	free := mustFree(t, drv)
	budget := accounting.ResidentLiveBudget(info.TotalMemory, free, b.MemoryStats().Allocated)
	_, err = b.Alloc(int(min(budget+1, uint64(^uint(0)>>1))))
	if !errors.Is(err, core.ErrBudget) {
		t.Fatalf("allocating budget+1 = %d bytes: want ErrBudget, got %v", budget+1, err)
	}
	if b.MemoryStats().Allocated != 0 {
		t.Fatalf("a refused allocation left %d bytes accounted", b.MemoryStats().Allocated)
	}
	n := int(min(budget/4, 64<<20))
	h, err := b.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d) within a budget of %d: %v", n, budget, err)
	}
	if got := b.MemoryStats().Allocated; got != uint64(n) {
		t.Fatalf("MemoryStats().Allocated = %d, want %d", got, n)
	}
	if err := b.Free(h); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if got := b.MemoryStats().Allocated; got != 0 {
		t.Fatalf("MemoryStats().Allocated after free = %d", got)
	}
}

func testRefusals(t *testing.T, b *core.Backend, _ driver.Driver) {
	m := newModel(t, b, 4, 100)
	h := m.bufs[0]
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"zero size", errOf(b.Alloc(0)), core.ErrInvalidArgument},
		{"unknown handle", b.Free(core.Buffer{ID: 1 << 63, Len: 1}), core.ErrUnknownHandle},
		{"drifted handle", b.Upload(core.UploadAt{Buf: core.Buffer{ID: h.ID, Len: 99}, Data: make([]byte, 99)}), core.ErrUnknownHandle},
		{"length mismatch", core.UploadSlice(b, h, make([]byte, 99)), core.ErrInvalidArgument},
		{"upload past the end", b.Upload(core.UploadAt{Buf: h, Offset: 2, Data: make([]byte, 99)}), core.ErrInvalidArgument},
		{"range past end", errOf(b.Download(h.Slice(90, 11), nil)), core.ErrInvalidArgument},
		{"negative offset", b.Upload(core.UploadAt{Buf: h, Offset: -1, Data: []byte{1}}), core.ErrInvalidArgument},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: want %v, got %v", c.name, c.want, c.err)
		}
	}
	m.check("after refusals")
}

func errOf[T any](_ T, err error) error { return err }

func testPinnedAsync(t *testing.T, b *core.Backend, _ driver.Driver) {
	m := newModel(t, b, 5, 10000)
	h := m.bufs[0]
	p, err := b.AllocHostPinned(4096)
	if err != nil {
		t.Fatalf("AllocHostPinned: %v", err)
	}
	copy(p.Bytes(), m.bytes(4096))
	copy(m.want[0][100:], p.Bytes())
	if err := b.UploadAsync(core.UploadAt{Buf: h, Offset: 100, Data: p.Bytes()}); err != nil {
		t.Fatalf("UploadAsync: %v", err)
	}
	if err := b.Free(h); !errors.Is(err, core.ErrInFlight) {
		t.Fatalf("freeing an async upload's target: want ErrInFlight, got %v", err)
	}
	mem := m.bytes(3000)
	copy(m.want[0][7000:], mem)
	if err := b.PinHostBuffer(unsafe.Pointer(&mem[0]), len(mem)); err != nil {
		t.Fatalf("PinHostBuffer: %v", err)
	}
	if err := b.UploadAsync(core.UploadAt{Buf: h, Offset: 7000, Data: mem}); err != nil {
		t.Fatalf("UploadAsync from registered memory: %v", err)
	}
	if err := b.SynchronizeUploads(); err != nil {
		t.Fatalf("SynchronizeUploads: %v", err)
	}
	if err := b.UnpinHostBuffer(unsafe.Pointer(&mem[0])); err != nil {
		t.Fatalf("UnpinHostBuffer: %v", err)
	}
	runtime.KeepAlive(mem)
	if err := p.Free(); err != nil {
		t.Fatalf("PinnedBuffer.Free: %v", err)
	}
	m.check("pinned async uploads")
}

func testConcurrency(t *testing.T, b *core.Backend, _ driver.Driver) {
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for round := range 10 {
				n := 1 + r.Intn(20000)
				h, err := b.Alloc(n)
				if err != nil {
					errs <- err
					return
				}
				data := make([]byte, n)
				r.Read(data)
				err = b.Upload(core.UploadAt{Buf: h, Data: data})
				var got []byte
				if err == nil {
					got, err = b.Download(h.All(), nil)
				}
				if ferr := b.Free(h); err == nil {
					err = ferr
				}
				if err == nil && !bytes.Equal(got, data) {
					err = fmt.Errorf("worker %d round %d: bytes differ", w, round)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
