package fakes_test

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/fakes"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestFaultsFireOnTheirCallOnly(t *testing.T) {
	var f fakes.Faults
	null, err := f.Admit("A")
	require.NoError(t, err)
	require.False(t, null)

	f.FailNth("A", 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	f.NullNth("A", 3)
	f.NullNth("B", 1)
	f.FailNth("A", 0, cudaapi.CUDA_ERROR_UNKNOWN) // never fires

	null, err = f.Admit("A")
	assert.False(t, null)
	assert.NoError(t, err, "the first call from now is clean")
	null, err = f.Admit("A")
	assert.False(t, null)
	assert.Equal(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, err)
	null, err = f.Admit("A")
	assert.True(t, null)
	assert.NoError(t, err)
	null, err = f.Admit("A")
	assert.False(t, null)
	assert.NoError(t, err, "a fault fires once")

	null, err = f.Admit("B")
	assert.True(t, null, "faults are kept per operation")
	assert.NoError(t, err)
	assert.Equal(t, uint64(5), f.Count("A"), "failed calls are counted")
	assert.Equal(t, uint64(1), f.Count("B"))
	assert.Zero(t, f.Count("C"))
}

func TestFaultsFirstSetWinsAndFailAllStops(t *testing.T) {
	var f fakes.Faults
	f.FailNth("A", 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	f.NullNth("A", 1)
	_, err := f.Admit("A")
	assert.Equal(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)
	null, err := f.Admit("A")
	assert.False(t, null, "the second fault on a call is dropped with it")
	assert.NoError(t, err)

	f.FailAll("A", cudaapi.CUDA_ERROR_UNKNOWN)
	f.NullNth("A", 2)
	_, err = f.Admit("A")
	assert.Equal(t, cudaapi.CUDA_ERROR_UNKNOWN, err)
	null, err = f.Admit("A")
	assert.True(t, null, "a numbered fault beats FailAll")
	assert.NoError(t, err)
	f.FailAll("A", 0)
	_, err = f.Admit("A")
	assert.NoError(t, err)
}

func TestFaultsCountConcurrentCalls(t *testing.T) {
	var f fakes.Faults
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = f.Admit("A")
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, uint64(800), f.Count("A"))
}

func TestLogCaptureKeepsErrorRecords(t *testing.T) {
	log, logs := fakes.NewLog()
	log.Info("fine")
	log.Warn("odd")
	log.With("k", 1).WithGroup("g").Error("broken", "n", 2)
	log.Log(t.Context(), slog.LevelError+4, "worse")
	got := logs.Errors()
	assert.Equal(t, []string{"broken", "worse"}, got)
	got[0] = "changed"
	assert.Equal(t, "broken", logs.Errors()[0], "Errors returns a copy")
}

// recorder is a testing.TB that records failures instead of reporting them.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Name() string          { return "recorder" }
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) FailNow()              { r.failed = true; panic(r) }

// check runs RequireErrKind on r and reports whether it failed.
func check(err error, sentinel error, fragments ...string) (failed bool) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		failed = r.failed
	}()
	fakes.RequireErrKind(r, err, sentinel, fragments...)
	return r.failed
}

func TestRequireErrKind(t *testing.T) {
	e := errs.New("Alloc", errs.KindBudget, "64 bytes over", "free something first.")
	ce := fakes.RequireErrKind(t, fmt.Errorf("wrapped: %w", e), errs.ErrBudget, "Alloc", "64 bytes")
	assert.Same(t, e, ce)

	assert.False(t, check(e, errs.ErrBudget, "64 bytes"))
	assert.True(t, check(nil, errs.ErrBudget), "nil error")
	assert.True(t, check(e, errs.ErrDriver), "another kind")
	assert.True(t, check(e, errs.ErrBudget, "128 bytes"), "missing fragment")
	assert.True(t, check(errors.New("plain"), errors.New("plain")), "not an *errs.Error")
	noFix := errs.New("Alloc", errs.KindBudget, "64 bytes over", "")
	assert.True(t, check(noFix, errs.ErrBudget), "no Fix sentence")
}
