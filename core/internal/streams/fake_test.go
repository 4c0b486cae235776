package streams_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/fakes"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The driver calls fakeDriver counts and fails.
const (
	opStreamCreate      = "StreamCreate"
	opStreamDestroy     = "StreamDestroy"
	opStreamSynchronize = "StreamSynchronize"
	opEventCreate       = "EventCreate"
	opEventDestroy      = "EventDestroy"
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
	fakes.Faults
}

func newFake() *fakeDriver {
	return &fakeDriver{next: 0x1000, streams: map[driver.Stream]int{}, events: map[driver.Event]bool{},
		stuck: map[driver.Stream]bool{}}
}

// setStuck makes every StreamSynchronize of s fail (or succeed again).
func (f *fakeDriver) setStuck(s driver.Stream, stuck bool) {
	f.mu.Lock()
	f.stuck[s] = stuck
	f.mu.Unlock()
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
	if null, err := f.Admit(opStreamCreate); err != nil || null {
		return 0, err
	}
	f.next++
	f.streams[driver.Stream(f.next)] = 0
	return driver.Stream(f.next), nil
}

func (f *fakeDriver) StreamDestroy(s driver.Stream) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.Admit(opStreamDestroy); err != nil {
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
	if _, err := f.Admit(opStreamSynchronize); err != nil {
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
	if null, err := f.Admit(opEventCreate); err != nil || null {
		return 0, err
	}
	f.next++
	f.events[driver.Event(f.next)] = true
	return driver.Event(f.next), nil
}

func (f *fakeDriver) EventDestroy(e driver.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.Admit(opEventDestroy); err != nil {
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

// requireErrKind and newLog are the shared test helpers, under the names
// these tests use.
var (
	requireErrKind = fakes.RequireErrKind
	newLog         = fakes.NewLog
)
