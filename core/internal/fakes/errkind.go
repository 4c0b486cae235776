package fakes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// RequireErrKind asserts err is an *errs.Error of the sentinel's kind whose
// message contains every fragment and a "Fix: " sentence, and returns it.
// It stops the test when err is nil, of another kind, or not an *errs.Error.
func RequireErrKind(t testing.TB, err error, sentinel error, fragments ...string) *errs.Error {
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
