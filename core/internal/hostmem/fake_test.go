package hostmem

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The driver calls a fakeHost counts and fails.
const (
	opHostAlloc      = "HostAlloc"
	opHostFree       = "HostFree"
	opHostRegister   = "HostRegister"
	opHostUnregister = "HostUnregister"
)

// fakeHost is a driver's pinned host memory for these tests (core/sim
// imports core, which imports this package): real Go memory behind
// HostAlloc, every call counted (failed ones too), failures injected by
// call number or on every call, and the memory still allocated or
// registered listed, so a test can prove nothing leaked. HostFree poisons
// what it frees, as core/sim does, and HostFree of memory it never handed
// out fails.
type fakeHost struct {
	mu     sync.Mutex
	live   map[uintptr]int    // HostAlloc buffers: first byte -> length
	regs   map[uintptr]uint64 // HostRegister ranges: first byte -> length
	calls  map[string]uint64
	faults map[string][]fault
	always map[string]cudaapi.Result // every call fails with this code
	// cached counts the blocks a CacheNotifier call said are in the cache.
	cached atomic.Int64
}

// fault makes one call fail (code) or return success with a null result.
type fault struct {
	countdown int
	code      cudaapi.Result
	null      bool
}

func newHost() *fakeHost {
	return &fakeHost{live: map[uintptr]int{}, regs: map[uintptr]uint64{}, calls: map[string]uint64{},
		faults: map[string][]fault{}, always: map[string]cudaapi.Result{}}
}

// admit counts a call of op and returns the fault that falls on it.
// Callers hold mu.
func (h *fakeHost) admit(op string) (code cudaapi.Result, null bool) {
	h.calls[op]++
	var fired *fault
	kept := h.faults[op][:0]
	for _, f := range h.faults[op] {
		if f.countdown--; f.countdown == 0 {
			if fired == nil {
				fired = &f
			}
			continue
		}
		kept = append(kept, f)
	}
	h.faults[op] = kept
	if fired != nil {
		return fired.code, fired.null
	}
	return h.always[op], false
}

// failNth makes the nth call of op from now (1: the next) fail with code.
func (h *fakeHost) failNth(op string, n int, code cudaapi.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[op] = append(h.faults[op], fault{countdown: n, code: code})
}

// nullNth makes the nth call of op from now return success and nothing.
func (h *fakeHost) nullNth(op string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[op] = append(h.faults[op], fault{countdown: n, null: true})
}

// failAll makes every call of op fail with code (0: none).
func (h *fakeHost) failAll(op string, code cudaapi.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.always[op] = code
}

// count returns how many times op was called.
func (h *fakeHost) count(op string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[op]
}

func (h *fakeHost) HostAlloc(n uint64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if code, null := h.admit(opHostAlloc); code != 0 || null {
		if null {
			return nil, nil
		}
		return nil, code
	}
	if n == 0 {
		return nil, cudaapi.CUDA_ERROR_INVALID_VALUE
	}
	buf := make([]byte, n)
	h.live[uintptr(unsafe.Pointer(&buf[0]))] = len(buf)
	return buf, nil
}

func (h *fakeHost) HostFree(p unsafe.Pointer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if code, null := h.admit(opHostFree); code != 0 || null {
		if null {
			return nil
		}
		return code
	}
	n, ok := h.live[uintptr(p)]
	if !ok {
		return cudaapi.CUDA_ERROR_INVALID_VALUE
	}
	for i, b := 0, unsafe.Slice((*byte)(p), n); i < n; i++ {
		b[i] = 0xDE
	}
	delete(h.live, uintptr(p))
	return nil
}

func (h *fakeHost) HostRegister(p unsafe.Pointer, n uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if code, _ := h.admit(opHostRegister); code != 0 {
		return code
	}
	h.regs[uintptr(p)] = n
	return nil
}

func (h *fakeHost) HostUnregister(p unsafe.Pointer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if code, _ := h.admit(opHostUnregister); code != 0 {
		return code
	}
	if _, ok := h.regs[uintptr(p)]; !ok {
		return cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
	}
	delete(h.regs, uintptr(p))
	return nil
}

// notifyingHost is a fakeHost that is also a driver.CacheNotifier.
type notifyingHost struct{ *fakeHost }

func (h notifyingHost) MemCached(uint64, uint64) {}
func (h notifyingHost) MemReused(uint64, uint64) {}
func (h notifyingHost) HostCached([]byte)        { h.cached.Add(1) }
func (h notifyingHost) HostReused([]byte)        { h.cached.Add(-1) }

// requireNoLive fails the test when h still holds any allocated or
// registered memory.
func requireNoLive(t *testing.T, h *fakeHost) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(t, h.live, "pinned buffers still allocated")
	require.Empty(t, h.regs, "ranges still registered")
}

// requireErrKind asserts err is an *errs.Error of the sentinel's kind whose
// message contains every fragment.
func requireErrKind(t *testing.T, err error, sentinel error, fragments ...string) *errs.Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	var ce *errs.Error
	require.ErrorAs(t, err, &ce)
	for _, f := range fragments {
		assert.Contains(t, err.Error(), f)
	}
	assert.Contains(t, err.Error(), "Fix: ")
	return ce
}

// logCapture is a slog.Handler that keeps the messages of error records, so
// tests can assert that a repair or a failed free was reported.
type logCapture struct {
	mu   sync.Mutex
	errs []string
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCapture) WithGroup(string) slog.Handler            { return h }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.errs = append(h.errs, r.Message)
		h.mu.Unlock()
	}
	return nil
}

func (h *logCapture) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}

func newLog() (*slog.Logger, *logCapture) {
	h := &logCapture{}
	return slog.New(h), h
}

// goHelpers runs eviction jobs on goroutines of their own, the way core's
// copy helpers run them: tasks claimed one at a time from a counter, finish
// on the goroutine that returned the last one.
type goHelpers struct{}

type goJob struct {
	task       func(int)
	finish     func()
	n          int64
	next, left atomic.Int64
	done       chan struct{}
}

func (goHelpers) NewJob(n int, task func(int), finish func(), _ time.Duration) Job {
	j := &goJob{task: task, finish: finish, n: int64(n), done: make(chan struct{})}
	j.left.Store(int64(n))
	return j
}

// step runs the next unclaimed task and reports whether there was one.
func (j *goJob) step() bool {
	i := j.next.Add(1) - 1
	if i >= j.n {
		return false
	}
	j.task(int(i))
	if j.left.Add(-1) == 0 {
		j.finish()
		close(j.done)
	}
	return true
}

func (j *goJob) Start(workers int) {
	for range workers {
		go func() {
			for j.step() {
			}
		}()
	}
}

func (j *goJob) Wait() {
	for j.step() {
	}
	<-j.done
}

// newPool returns a pool over h caching at most maxCached bytes, whose
// evictions run on goHelpers.
func newPool(h Host, maxCached uint64, log *slog.Logger) *Pool {
	return New(h, Config{Cap: maxCached, Log: log, Helpers: goHelpers{}})
}
