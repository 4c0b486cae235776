package fakes

import (
	"context"
	"log/slog"
	"sync"
)

// LogCapture is a slog.Handler that keeps the messages of error records, so
// a test can assert that a repair or a failed release was reported.
type LogCapture struct {
	mu   sync.Mutex
	errs []string
}

// NewLog returns a logger that writes to a new LogCapture, and the capture.
func NewLog() (*slog.Logger, *LogCapture) {
	h := &LogCapture{}
	return slog.New(h), h
}

// Enabled reports true: every record reaches Handle.
func (h *LogCapture) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns h: attributes are not kept.
func (h *LogCapture) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *LogCapture) WithGroup(string) slog.Handler { return h }

// Handle keeps the message of a record at error level or above.
func (h *LogCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.errs = append(h.errs, r.Message)
		h.mu.Unlock()
	}
	return nil
}

// Errors returns a copy of the messages of the error records kept so far,
// oldest first.
func (h *LogCapture) Errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}
