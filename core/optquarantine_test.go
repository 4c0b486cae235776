package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestOptimizerDispatcherCloseRetriesTheQuarantine: a dispatcher read whose
// fence and drain fail leaves its work quarantined, holding the id in
// flight; once the stream can synchronize again, Free and Close of
// the dispatcher retry the quarantine instead of refusing the id as in
// flight (TestCoreConcurrentFaults failed on that in long mode).
func TestOptimizerDispatcherCloseRetriesTheQuarantine(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		dev := sim.New(sim.Config{TotalMemory: 1 << 20})
		b, err := core.Open(dev, core.WithLogger(quietLogger))
		require.NoError(t, err)
		d, err := core.NewOptimizerDispatcher(b)
		require.NoError(t, err)
		id, err := d.Alloc(4096)
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: id, Data: make([]byte, 4096)}))

		dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
		_, err = b.Download(id.All(), nil)
		require.ErrorIs(t, err, core.ErrDriver)
		require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
		dev.ClearFaults()

		if !closeFirst {
			require.NoError(t, d.Free(id))
			require.Zero(t, b.LaunchResourceCounts().Quarantined)
		}
		require.NoError(t, d.Close())
		require.Zero(t, b.LaunchResourceCounts().Quarantined)
		require.NoError(t, b.Close())
		sim.RequireNoLeaks(t, dev)
	}
}
