package core_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestDispatcherBusyIDsInsideTheBackendPin frees a dispatcher id from
// inside the Backend's pin of a dispatcher call that uses it: the moment
// after the dispatcher resolved the id and let go of its lock, before the
// Backend marks the buffer in flight. Only the dispatcher's own busy mark
// guards that window; FreeResident there must be refused as in flight, and
// the id must free normally once the call is done.
func TestDispatcherBusyIDsInsideTheBackendPin(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(d *core.OptimizerDispatcher, id uint64) error
	}{
		{"Run", func(d *core.OptimizerDispatcher, id uint64) error {
			_, err := d.Run(core.OptBatch{Fills: []core.OptFill{{ID: id, Value: 9}}, Reads: []core.OptRange{{ID: id, Len: 64}}}, nil)
			return err
		}},
		{"UploadResident", func(d *core.OptimizerDispatcher, id uint64) error { return d.UploadResident(id, make([]byte, 4096)) }},
		{"ReadResident", func(d *core.OptimizerDispatcher, id uint64) error { _, err := d.ReadResident(id); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{})
			d, err := core.NewOptimizerDispatcher(b)
			require.NoError(t, err)
			id, err := d.AllocResident(4096)
			require.NoError(t, err)
			var inWindow error
			fired := false
			restore := core.SetPinHookForTest(func(hb *core.Backend) {
				if hb == b && !fired {
					fired = true
					inWindow = d.FreeResident(id)
				}
			})
			err = tc.call(d, id)
			restore()
			require.True(t, fired, "the call did not pin through the Backend")
			require.True(t, errors.Is(inWindow, core.ErrInFlight), "FreeResident of an id a running call uses: %v", inWindow)
			require.NoError(t, err)
			require.NoError(t, d.FreeResident(id))
			require.NoError(t, d.Close())
		})
	}
}
