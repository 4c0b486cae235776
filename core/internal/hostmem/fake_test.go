package hostmem

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/fakes"
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
	mu   sync.Mutex
	live map[uintptr]int    // HostAlloc buffers: first byte -> length
	regs map[uintptr]uint64 // HostRegister ranges: first byte -> length
	fakes.Faults
	// cached counts the blocks a CacheNotifier call said are in the cache.
	cached atomic.Int64
	// extra is added to the length of every buffer HostAlloc hands out
	// from now on: a driver returning the wrong length.
	extra atomic.Int64
}

func newHost() *fakeHost {
	return &fakeHost{live: map[uintptr]int{}, regs: map[uintptr]uint64{}}
}

func (h *fakeHost) HostAlloc(n uint64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if null, err := h.Admit(opHostAlloc); err != nil || null {
		return nil, err
	}
	if n == 0 {
		return nil, cudaapi.CUDA_ERROR_INVALID_VALUE
	}
	buf := make([]byte, int64(n)+h.extra.Load())
	h.live[uintptr(unsafe.Pointer(&buf[0]))] = len(buf)
	return buf, nil
}

func (h *fakeHost) HostFree(p unsafe.Pointer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if null, err := h.Admit(opHostFree); err != nil || null {
		return err
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
	if _, err := h.Admit(opHostRegister); err != nil {
		return err
	}
	h.regs[uintptr(p)] = n
	return nil
}

func (h *fakeHost) HostUnregister(p unsafe.Pointer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.Admit(opHostUnregister); err != nil {
		return err
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

// requireErrKind and newLog are the shared test helpers, under the names
// these tests use.
var (
	requireErrKind = fakes.RequireErrKind
	newLog         = fakes.NewLog
)

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
