package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestBlockingWaitsRecordNoCompletionEvent: a call that waits with the
// fence itself (Run, Dispatch, RunContext with a context that is
// never done) queues its work and one synchronization, and no completion
// event, which only a Pending's IsReady (or a polling wait) would read;
// RunAsync, DispatchAsync and a polling RunContext record one, and
// it answers IsReady.
func TestBlockingWaitsRecordNoCompletionEvent(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(16)
	require.NoError(t, err)
	fill := core.Batch{Fills: []core.Fill{{Buf: h, Value: 3}}, Reads: []core.Range{{Buf: h, Len: 16}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		call    func() error
		records uint64
	}{
		{"Run", func() error { _, err := b.Run(fill, nil); return err }, 0},
		{"Dispatch", func() error {
			return b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
		}, 0},
		{"RunContext(Background)", func() error { _, err := b.RunContext(context.Background(), fill, nil); return err }, 0},
		{"RunContext(deadline)", func() error { _, err := b.RunContext(ctx, fill, nil); return err }, 1},
		{"RunAsync", func() error {
			p, err := b.RunAsync(fill)
			require.NoError(t, err)
			done, err := p.IsReady()
			require.NoError(t, err)
			assert.True(t, done, "the sim completes work when it is queried")
			return p.Close()
		}, 1},
		{"DispatchAsync", func() error {
			p, err := b.DispatchAsync(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{2}})
			require.NoError(t, err)
			return p.Await()
		}, 1},
	} {
		before := dev.Calls(sim.OpEventRecord)
		syncs := dev.Calls(sim.OpStreamSynchronize) + dev.Calls(sim.OpEventQuery)
		require.NoError(t, tc.call(), tc.name)
		assert.Equal(t, tc.records, dev.Calls(sim.OpEventRecord)-before, "%s: completion events recorded", tc.name)
		assert.NotEqual(t, syncs, dev.Calls(sim.OpStreamSynchronize)+dev.Calls(sim.OpEventQuery), "%s waited", tc.name)
	}
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{2, 0, 0, 0}, got[:4], "the last dispatch ran")
}
