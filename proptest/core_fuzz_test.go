package proptest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFuzzSteps bounds one input's sequence so a long input cannot make one
// execution slow.
const maxFuzzSteps = 64

// FuzzBackendSequence decodes its input into a device configuration, a fault
// mode and a command sequence (the same command language as the gopter
// state machine, drawn from the input's bytes instead of a random source),
// runs it against a Backend on the simulated device and the model with every
// check after every step, and ends with Close and an empty device.
func FuzzBackendSequence(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("\x00\x01\x02\x00\x00\x07\x40\x00\x00\x00\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0"))
	fs, err := newForeign()
	require.NoError(f, err)
	f.Cleanup(func() {
		if err := fs.close(); err != nil {
			f.Error(err)
		}
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteEntropy{b: data}
		mode := faultMode(src.intn(3))
		cfg := drawConfig(src, mode)
		kinds := allKinds
		kinds.faults = mode == faultsChosen
		coreStats.sequences.Add(1)
		r, err := newRunner(cfg, fs.h)
		require.NoError(t, err)
		for i := 0; i < maxFuzzSteps && !src.done(); i++ {
			if err := r.do(drawStep(src, kinds)); err != nil {
				t.Fatalf("config %v: %v", cfg, err)
			}
		}
		if err := r.closeAndCheck(); err != nil {
			t.Fatalf("config %v: final Close: %v\nlast calls: %v", cfg, err, r.trace)
		}
	})
}
