package dynlib

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenErrorText(t *testing.T) {
	e := &OpenError{Path: "libx.so.1", Reason: "cannot open shared object file"}
	assert.Equal(t, "dlopen libx.so.1: cannot open shared object file", e.Error())
}

func TestEnvOr(t *testing.T) {
	t.Setenv("VYRECUDA_DYNLIB_TEST", "")
	assert.Equal(t, "libdefault.so.1", EnvOr("VYRECUDA_DYNLIB_TEST", "libdefault.so.1"), "empty means unset")
	t.Setenv("VYRECUDA_DYNLIB_TEST", "/opt/lib/libx.so")
	assert.Equal(t, "/opt/lib/libx.so", EnvOr("VYRECUDA_DYNLIB_TEST", "libdefault.so.1"))
}

func TestOpenFirst(t *testing.T) {
	var tried []string
	open := func(p string) (Library, error) {
		tried = append(tried, p)
		if p == "b" {
			return &fakeLibrary{}, nil
		}
		return nil, fmt.Errorf("%s: cannot open", p)
	}
	lib, errs := OpenFirst([]string{"a", "b", "c"}, open)
	assert.NotNil(t, lib)
	assert.Nil(t, errs)
	assert.Equal(t, []string{"a", "b"}, tried, "stops at the first that loads")

	lib, errs = OpenFirst([]string{"x", "y"}, open)
	assert.Nil(t, lib)
	require.Len(t, errs, 2)
	assert.Equal(t, "x: cannot open", errs[0].Error())
	assert.Equal(t, "y: cannot open", errs[1].Error())
}

func TestOpenFirstDefaultOpenerFailsAsNil(t *testing.T) {
	lib, errs := OpenFirst([]string{"/nonexistent/libvyrecuda-none.so"}, nil)
	assert.Nil(t, lib, "a failed dlopen is a nil Library, not a typed nil")
	require.Len(t, errs, 1)
	var oe *OpenError
	require.True(t, errors.As(errs[0], &oe))
	assert.Equal(t, "/nonexistent/libvyrecuda-none.so", oe.Path)
	assert.NotEmpty(t, oe.Reason)
}
