package streams_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// op names the driver calls fakeDriver counts and fails.
type op int

const (
	opStreamCreate op = iota
	opStreamDestroy
	opStreamSynchronize
	opEventCreate
	opEventDestroy
	numOps
)

// fakeDriver is the part of a device a Pool uses: streams and events with
// handles it checks, work queued by EventRecord until a synchronization,
// call counts, a live-object count, and faults: fail the nth call of an
// op, return a null handle from the nth create, or fail every
// StreamSynchronize of a stuck stream. The rest of driver.Driver is left
// nil: a Pool never calls it.
type fakeDriver struct {
	driver.Driver

	mu      sync.Mutex
	next    uintptr
	streams map[driver.Stream]int // queued work per live stream
	events  map[driver.Event]bool // live events
	stuck   map[driver.Stream]bool
	calls   [numOps]uint64
	fail    [numOps]map[uint64]cudaapi.Result
	null    [numOps]map[uint64]bool
}

func newFake() *fakeDriver {
	return &fakeDriver{next: 0x1000, streams: map[driver.Stream]int{}, events: map[driver.Event]bool{},
		stuck: map[driver.Stream]bool{}}
}

// failNth makes the nth call of o (counting from now) fail with code.
func (f *fakeDriver) failNth(o op, n uint64, code cudaapi.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[o] == nil {
		f.fail[o] = map[uint64]cudaapi.Result{}
	}
	f.fail[o][f.calls[o]+n] = code
}

// nullNth makes the nth create of o (counting from now) return a null
// handle with success.
func (f *fakeDriver) nullNth(o op, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.null[o] == nil {
		f.null[o] = map[uint64]bool{}
	}
	f.null[o][f.calls[o]+n] = true
}

// setStuck makes every StreamSynchronize of s fail (or succeed again).
func (f *fakeDriver) setStuck(s driver.Stream, stuck bool) {
	f.mu.Lock()
	f.stuck[s] = stuck
	f.mu.Unlock()
}

// count counts a call of o and returns its injected fault: a null handle
// or an error. Callers hold mu.
func (f *fakeDriver) count(o op) (null bool, err error) {
	f.calls[o]++
	n := f.calls[o]
	if code, ok := f.fail[o][n]; ok {
		return false, code
	}
	return f.null[o][n], nil
}

// callCount returns how many calls of o the fake has seen.
func (f *fakeDriver) callCount(o op) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[o]
}

// live returns how many streams and events exist.
func (f *fakeDriver) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.streams) + len(f.events)
}

func (f *fakeDriver) StreamCreate() (driver.Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if null, err := f.count(opStreamCreate); err != nil || null {
		return 0, err
	}
	f.next++
	f.streams[driver.Stream(f.next)] = 0
	return driver.Stream(f.next), nil
}

func (f *fakeDriver) StreamDestroy(s driver.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.count(opStreamDestroy); err != nil {
		return err
	}
	queued, ok := f.streams[s]
	switch {
	case !ok:
		return cudaapi.CUDA_ERROR_INVALID_HANDLE
	case queued > 0:
		return cudaapi.CUDA_ERROR_ILLEGAL_STATE // work is still queued on it
	}
	delete(f.streams, s)
	return nil
}

func (f *fakeDriver) StreamSynchronize(s driver.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.count(opStreamSynchronize); err != nil {
		return err
	}
	if _, ok := f.streams[s]; !ok {
		return cudaapi.CUDA_ERROR_INVALID_HANDLE
	}
	if f.stuck[s] {
		return cudaapi.CUDA_ERROR_LAUNCH_FAILED
	}
	f.streams[s] = 0
	return nil
}

func (f *fakeDriver) EventCreate(bool) (driver.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if null, err := f.count(opEventCreate); err != nil || null {
		return 0, err
	}
	f.next++
	f.events[driver.Event(f.next)] = true
	return driver.Event(f.next), nil
}

func (f *fakeDriver) EventDestroy(e driver.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.count(opEventDestroy); err != nil {
		return err
	}
	if !f.events[e] {
		return cudaapi.CUDA_ERROR_INVALID_HANDLE
	}
	delete(f.events, e)
	return nil
}

// queue puts one piece of work on s, as a kernel or copy would.
func (f *fakeDriver) queue(t *testing.T, s driver.Stream) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.streams[s]
	require.True(t, ok, "queue on an unknown stream")
	f.streams[s]++
}

// EventRecord queues the event on s; the work before it stays queued until
// EventSynchronize or StreamSynchronize.
func (f *fakeDriver) EventRecord(e driver.Event, s driver.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.streams[s]; !ok || !f.events[e] {
		return cudaapi.CUDA_ERROR_INVALID_HANDLE
	}
	f.streams[s]++
	return nil
}

// EventSynchronize completes every stream's queued work: the fake keeps no
// order between events, only whether work is queued.
func (f *fakeDriver) EventSynchronize(e driver.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.events[e] {
		return cudaapi.CUDA_ERROR_INVALID_HANDLE
	}
	for s := range f.streams {
		if !f.stuck[s] {
			f.streams[s] = 0
		}
	}
	return nil
}

// requireNoLive fails the test when the fake still holds a stream or event.
func requireNoLive(t *testing.T, f *fakeDriver) {
	t.Helper()
	require.Zero(t, f.live(), "the fake device still holds streams or events")
}

// requireErrKind asserts err is an *errs.Error of the sentinel's kind whose
// message contains every fragment and one Fix sentence.
func requireErrKind(t *testing.T, err error, sentinel error, fragments ...string) *errs.Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	var ce *errs.Error
	require.ErrorAs(t, err, &ce)
	for _, fr := range fragments {
		assert.Contains(t, err.Error(), fr)
	}
	assert.Contains(t, err.Error(), "Fix: ")
	return ce
}

// logCapture is a slog.Handler that keeps the messages of error records.
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
