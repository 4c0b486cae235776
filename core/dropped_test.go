package core_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// warnCapture keeps the messages of warning and error records.
type warnCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *warnCapture) WithGroup(string) slog.Handler            { return h }
func (h *warnCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		h.msgs = append(h.msgs, r.Message)
		h.mu.Unlock()
	}
	return nil
}

func (h *warnCapture) joined() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.msgs, "\n")
}

// dropPending queues work on h and drops its Pending without collecting it.
func dropPending(t *testing.T, b *core.Backend, h core.Buffer, reads bool) {
	t.Helper()
	batch := core.Batch{
		Uploads: []core.UploadAt{{Buf: h, Data: make([]byte, h.Len)}},
		Steps:   []core.Step{{Program: core.ProgramFillU32(), Bufs: []core.Buffer{h}, Config: core.DispatchConfig{Scalars: []uint32{7}}}},
	}
	if reads {
		batch.Reads = []core.Range{{Buf: h, Len: h.Len}}
	}
	_, err := b.RunAsync(batch)
	require.NoError(t, err)
}

// untilFreed runs the garbage collector until Free of h stops
// refusing it as in flight, for at most a bounded number of rounds.
func untilFreed(t *testing.T, b *core.Backend, h core.Buffer) error {
	t.Helper()
	var err error
	for range 200 {
		runtime.GC()
		if err = b.Free(h); !errors.Is(err, core.ErrInFlight) {
			return err
		}
		time.Sleep(time.Millisecond) // let the cleanup goroutine run
	}
	return err
}

// A Pending dropped without Await or Close is collected once garbage
// collected: its buffers become freeable, Close succeeds, nothing leaks, and
// a warning says what happened.
func TestDroppedPendingIsCollectedAfterGC(t *testing.T) {
	for _, reads := range []bool{false, true} {
		dev := sim.New(sim.Config{TotalMemory: testMemory})
		logs := &warnCapture{}
		b, err := core.Open(dev, core.WithLogger(slog.New(logs)))
		require.NoError(t, err)
		h, err := b.Alloc(64)
		require.NoError(t, err)
		dropPending(t, b, h, reads)

		err = b.Free(h)
		require.ErrorIs(t, err, core.ErrInFlight, "the work is still uncollected")
		// Named by the upload, the step and (with reads) the read of one
		// batch: one unfinished call.
		assert.Contains(t, err.Error(), "is used by unfinished work (1 unfinished call)")

		require.NoError(t, untilFreed(t, b, h), "reads=%v", reads)
		assert.Contains(t, logs.joined(), "garbage collected without Await")
		require.NoError(t, b.Close())
		sim.RequireNoLeaks(t, dev)
	}
}

// A collected Pending's cleanup does nothing: no warning, no second release.
func TestCollectedPendingDropsQuietly(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	logs := &warnCapture{}
	b, err := core.Open(dev, core.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	h, err := b.Alloc(64)
	require.NoError(t, err)
	func() {
		p, err := b.RunAsync(core.Batch{Clears: []core.Buffer{h}})
		require.NoError(t, err)
		require.NoError(t, p.Await())
	}()
	for range 5 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Close())
	assert.Empty(t, logs.joined())
	sim.RequireNoLeaks(t, dev)
}
