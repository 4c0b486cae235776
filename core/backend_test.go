package core_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

const testMemory = 64 << 20

// quietLogger swallows the repair events some tests provoke on purpose.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// openSim opens a Backend on a fresh simulated device and registers the
// leak check: at cleanup the Backend is closed (unless the test closed it)
// and the device must hold no live object.
func openSim(t testing.TB, cfg sim.Config, opts ...core.Option) (*core.Backend, *sim.Device) {
	t.Helper()
	if cfg.TotalMemory == 0 {
		cfg.TotalMemory = testMemory
	}
	dev := sim.New(cfg)
	b, err := core.Open(dev, append([]core.Option{core.WithLogger(quietLogger)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
		sim.RequireNoLeaks(t, dev)
	})
	return b, dev
}

func randomBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	r.Read(p)
	return p
}

func TestSmokeRoundTrip(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(100)
	require.NoError(t, err)
	data := randomBytes(rand.New(rand.NewSource(1)), 100)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))
	require.NoError(t, b.Free(h))
}
