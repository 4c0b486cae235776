//go:build !cgo

package dynlib

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenWithoutCgo(t *testing.T) {
	assert.False(t, HaveCgo)
	lib, err := Open("libc.so.6")
	assert.Nil(t, lib)
	var oe *OpenError
	require.True(t, errors.As(err, &oe))
	assert.Contains(t, oe.Reason, "without cgo")
}
