package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

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
