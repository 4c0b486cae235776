package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestInlineCopyReadsTheSourceWhenQueued: MemcpyHtoDInline takes ordinary
// Go memory, reads it when the call returns (a change made afterwards does
// not land), counts as MemcpyHtoDAsync, and is refused while the device
// does not report InlineCopies.
func TestInlineCopyReadsTheSourceWhenQueued(t *testing.T) {
	caps := DefaultCapabilities()
	caps.InlineCopies = true
	d := New(Config{TotalMemory: 1 << 20, Capabilities: &caps})
	dst, err := d.MemAlloc(64)
	require.NoError(t, err)
	s, err := d.StreamCreate()
	require.NoError(t, err)
	src := bytes.Repeat([]byte{7}, 64)
	require.NoError(t, d.MemcpyHtoDInline(dst, src, s))
	copy(src, bytes.Repeat([]byte{9}, 64)) // after the call: must not land
	require.Equal(t, uint64(1), d.CallCounts()[OpMemcpyHtoDAsync])
	out, err := d.HostAlloc(64)
	require.NoError(t, err)
	require.NoError(t, d.MemcpyDtoHAsync(out, dst, s))
	require.NoError(t, d.StreamSynchronize(s))
	require.Equal(t, bytes.Repeat([]byte{7}, 64), out)

	off := New(Config{TotalMemory: 1 << 20})
	dst2, err := off.MemAlloc(64)
	require.NoError(t, err)
	s2, err := off.StreamCreate()
	require.NoError(t, err)
	err = off.MemcpyHtoDInline(dst2, src, s2)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_NOT_SUPPORTED)
}
