package core_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// A synchronous many-buffer transfer holds its buffers in flight from its
// validation until it returns, counting a buffer once per time the call
// names it: Free in the middle of the call (from the phase hook,
// on the calling goroutine) is refused with ErrInFlight and the exact
// count, a buffer the call does not name frees, and once the call has
// returned every named buffer frees. The same holds for readbacks.
func TestSynchronousTransfersHoldTheirBuffersExactly(t *testing.T) {
	for _, readback := range []bool{false, true} {
		t.Run(fmt.Sprint("readback=", readback), func(t *testing.T) {
			b, dev := openSim(t, sim.Config{})
			n := core.PackMinCopiesForTest + 8
			hs := make([]core.Buffer, n)
			for i := range hs {
				h, err := b.Alloc(256)
				require.NoError(t, err)
				hs[i] = h
			}
			bystander, err := b.Alloc(256)
			require.NoError(t, err)
			named := append([]core.Buffer{hs[0]}, hs...) // hs[0] twice
			var once, twice, free error
			checked := false
			restore := core.SetPhaseHook(func(phase string) {
				if phase != "fence" || checked {
					return
				}
				checked = true
				once, twice, free = b.Free(hs[1]), b.Free(hs[0]), b.Free(bystander)
			})
			defer restore()
			if readback {
				_, err = b.DownloadMany(allOf(named), nil)
			} else {
				ups := make([]core.UploadAt, len(named))
				for i, h := range named {
					ups[i] = core.UploadAt{Buf: h, Data: make([]byte, h.Len)}
				}
				err = b.Upload(ups...)
			}
			require.NoError(t, err)
			require.True(t, checked, "the packed path ran")
			require.ErrorIs(t, once, core.ErrInFlight)
			assert.Contains(t, once.Error(), "(1 unfinished call)")
			require.ErrorIs(t, twice, core.ErrInFlight)
			assert.Contains(t, twice.Error(), "(2 unfinished calls)")
			require.NoError(t, free, "a buffer the call does not name is not held")
			for _, h := range hs {
				require.NoError(t, b.Free(h), "held no longer once the call returned")
			}
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}
