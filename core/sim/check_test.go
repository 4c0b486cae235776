package sim_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// fakeT records what a helper reports.
type fakeT struct{ errs []string }

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func TestCloseCheckedCatchesAForgottenFree(t *testing.T) {
	dev := sim.New(sim.Config{})
	b, err := core.Open(dev)
	require.NoError(t, err)
	h, err := b.Alloc(64)
	require.NoError(t, err)
	_ = h // forgotten: never freed

	ft := &fakeT{}
	assert.False(t, sim.RequireNoLiveResident(ft, b))
	sim.CloseChecked(ft, b, dev)
	require.Len(t, ft.errs, 2, "the live buffer, reported twice: once by each call; %q", ft.errs)
	assert.Contains(t, ft.errs[0], "1 resident buffer(s) (64 bytes) still live before Close")
	assert.True(t, dev.Live().Zero(), "Close still freed it; only the check before Close could see it")
}

func TestCloseCheckedPassesACleanTest(t *testing.T) {
	dev := sim.New(sim.Config{})
	b, err := core.Open(dev)
	require.NoError(t, err)
	h, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	ft := &fakeT{}
	sim.CloseChecked(ft, b, dev)
	assert.Empty(t, ft.errs)
}

// A fault that never fired stays armed and fails Close; ClearFaults disarms it.
func TestArmedFaultFailsCloseUntilCleared(t *testing.T) {
	for _, clear := range []bool{false, true} {
		dev := sim.New(sim.Config{})
		b, err := core.Open(dev)
		require.NoError(t, err)
		h, err := b.Alloc(64)
		require.NoError(t, err)
		ptr, err := b.ResidentDevicePtr(h)
		require.NoError(t, err)
		require.NoError(t, b.Free(h)) // kept by the device pool; Close frees it
		dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		if clear {
			dev.ClearFaults()
		}
		ft := &fakeT{}
		sim.CloseChecked(ft, b, dev)
		if clear {
			assert.Empty(t, ft.errs)
			continue
		}
		require.NotEmpty(t, ft.errs, "the armed fault failed Close")
		assert.Contains(t, ft.errs[0], "sim: Close:")
		require.NoError(t, dev.MemFree(ptr)) // what the failed Close left
		assert.True(t, dev.Live().Zero())
	}
}
