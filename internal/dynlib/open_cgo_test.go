//go:build cgo

package dynlib

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenRealLibrary(t *testing.T) {
	assert.True(t, HaveCgo)
	libc, err := Open("libc.so.6")
	require.NoError(t, err)
	a, err := libc.Lookup("abs")
	require.NoError(t, err)
	assert.NotZero(t, a)

	_, err = libc.Lookup("vyrecuda_no_such_symbol")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dlsym vyrecuda_no_such_symbol in libc.so.6")
}

func TestOpenMissingLibrary(t *testing.T) {
	path := t.TempDir() + "/libmissing.so.1"
	lib, err := Open(path)
	assert.Nil(t, lib)
	var oe *OpenError
	require.True(t, errors.As(err, &oe), "got %v", err)
	assert.Equal(t, path, oe.Path)
	assert.Contains(t, oe.Reason, path, "dlerror's text names the file")
}

func TestLoaderOverRealLibrary(t *testing.T) {
	l, _ := newTestLoader(nil, errNotFound)
	restore := l.Swap(func() (Library, error) {
		lib, err := Open("libc.so.6")
		if err != nil {
			return nil, err
		}
		return lib, nil
	})
	defer restore()
	a, err := l.NewProc(0, "vyrecuda_absent_v2", "abs").Find()
	require.NoError(t, err, "falls back to a symbol libc has")
	assert.NotZero(t, a)
	_, err = l.NewProc(0, "vyrecuda_absent").Find()
	var me *missError
	require.True(t, errors.As(err, &me))
	assert.Contains(t, me.Err.Error(), "vyrecuda_absent")
}
