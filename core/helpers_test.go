package core_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

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

func newDev() *sim.Device { return sim.New(sim.Config{TotalMemory: 1 << 30}) }

// requireNoLive fails the test when the simulated device still holds any
// allocation, pinned buffer, stream, event or module.
func requireNoLive(t *testing.T, dev *sim.Device) {
	t.Helper()
	require.Zero(t, dev.Live(), "simulated device still holds live objects")
}

// requireErrKind asserts err is a *core.Error of the sentinel's kind whose
// message contains every fragment.
func requireErrKind(t *testing.T, err error, sentinel error, fragments ...string) *core.Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	for _, f := range fragments {
		assert.Contains(t, err.Error(), f)
	}
	assert.Contains(t, err.Error(), "Fix: ")
	return ce
}
