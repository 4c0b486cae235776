//go:build gpu

package cuda_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// TestGPUPeerAttributes asks cuDeviceGetP2PAttribute about every ordered
// pair of devices: access agrees with cuDeviceCanAccessPeer (PeerLink),
// ranks are not negative, and a device is refused as its own peer. With one
// device only the refusal is checked.
func TestGPUPeerAttributes(t *testing.T) {
	n, err := cuda.Count()
	require.NoError(t, err)
	drvs := make([]*cuda.Driver, n)
	for i := range drvs {
		drvs[i], err = cuda.New(i)
		require.NoError(t, err)
		d := drvs[i]
		t.Cleanup(func() { assert.NoError(t, d.Close()) })
	}
	_, err = drvs[0].PeerAttributes(drvs[0])
	assert.ErrorIs(t, err, errs.ErrInvalidArgument, "a device is not its own peer")
	if n < 2 {
		t.Skip("one device: no pair to ask about")
	}
	for i, d := range drvs {
		for j, p := range drvs {
			if i == j {
				continue
			}
			a, err := d.PeerAttributes(p)
			require.NoError(t, err, "%d -> %d", i, j)
			link, err := d.PeerLink(p)
			require.NoError(t, err)
			assert.Equal(t, link == driver.PeerDirect, a.Access, "%d -> %d: access agrees with cuDeviceCanAccessPeer", i, j)
			assert.GreaterOrEqual(t, a.PerformanceRank, 0, "%d -> %d", i, j)
			t.Logf("%d -> %d: %+v", i, j, a)
		}
	}
}
