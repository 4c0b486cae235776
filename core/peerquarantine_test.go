package core_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// failPeerDrain makes a direct peer copy from a (device 0) to b (device 1)
// fail with a stream of b that cannot be drained: the copy's fence and the
// drain after it both fail.
func failPeerDrain(t *testing.T, m *sim.Machine, a, b *core.Backend) (src, dst core.Buffer) {
	t.Helper()
	src = putBytes(t, a, bytes.Repeat([]byte{7}, 1<<10))
	dst = putBytes(t, b, bytes.Repeat([]byte{1}, 1<<10))
	m.Device(1).FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	m.Device(1).FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
	err := core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 1 << 10}})
	require.ErrorIs(t, err, core.ErrDriver)
	require.Equal(t, 1, b.LaunchResourceCounts().Quarantined, "the destination's stream is quarantined")
	assert.Zero(t, a.LaunchResourceCounts().Quarantined, "the source lent no stream")
	return src, dst
}

// TestPeerCopyQuarantinesEachSideOnItsOwnBackend: a direct peer copy runs
// on the destination's stream but reads the source Backend's buffer. When
// that stream cannot be drained, the source buffer stays in flight on its
// own Backend, and once the stream synchronizes the source Backend can free
// it (its own retry reaches the destination's quarantine) and close
// cleanly.
func TestPeerCopyQuarantinesEachSideOnItsOwnBackend(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	a, b := g.Backends()[0], g.Backends()[1]
	src, dst := failPeerDrain(t, m, a, b)

	m.Device(1).FailRate(1, 1, sim.OpStreamSynchronize)
	assert.ErrorIs(t, a.Free(src), core.ErrInFlight, "the stuck copy may still read the source")
	assert.ErrorIs(t, b.Free(dst), core.ErrInFlight, "the stuck copy may still write the destination")
	m.Device(1).ClearFaults()

	require.NoError(t, a.Free(src), "the source's retry drains the destination's stream and releases its buffer")
	assert.Zero(t, b.LaunchResourceCounts().Quarantined)
	assert.Equal(t, bytes.Repeat([]byte{7}, 1<<10), getBytes(t, b, dst), "the queued copy ran")
	require.NoError(t, b.Free(dst))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// TestPeerCopyQuarantineCloseOfTheSource: the source Backend closes while
// the destination's stream still cannot be synchronized. Close does not
// refuse for a use it cannot end: it leaves the buffer the copy may read
// allocated and reports it, as for its own streams; the destination does
// the same for its stream.
func TestPeerCopyQuarantineCloseOfTheSource(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), core.WithLogger(quietLogger))
	require.NoError(t, err)
	a, b := g.Backends()[0], g.Backends()[1]
	failPeerDrain(t, m, a, b)
	m.Device(1).FailRate(1, 1, sim.OpStreamSynchronize)

	for _, tc := range []struct {
		name string
		b    *core.Backend
		want string
	}{
		{"source", a, "0 stream(s) of this Backend and 1 of other Backends"},
		{"destination", b, "1 stream(s) of this Backend and 0 of other Backends"},
	} {
		err := tc.b.Close()
		require.ErrorIs(t, err, core.ErrDriver, tc.name)
		var ce *core.Error
		require.True(t, errors.As(err, &ce), tc.name)
		assert.Contains(t, ce.Detail, tc.want, tc.name)
		assert.Contains(t, ce.Detail, "1 resident buffer(s) and 0 caller-pinned host range(s) (0 bytes), left allocated", tc.name)
	}
	l := m.Device(0).Live()
	assert.Equal(t, 1, l.Allocations, "only the source buffer the copy may read is left: %s", l)
	assert.Zero(t, l.Streams+l.Events)
}

// TestPeerCopyQuarantinesBothWaysConcurrently: peer copies both ways fail
// with streams that cannot be drained, so each Backend holds a stream and
// waits for the other's. Retrying both sides at once from several
// goroutines neither deadlocks nor recurses, and once the devices recover
// every buffer can be freed and both Backends close cleanly.
func TestPeerCopyQuarantinesBothWaysConcurrently(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	bs := [2]*core.Backend{g.Backends()[0], g.Backends()[1]}
	var bufs [2][2]core.Buffer // bufs[backend][0: copied from, 1: copied into]
	for i, b := range bs {
		bufs[i][0] = putBytes(t, b, bytes.Repeat([]byte{byte(i + 1)}, 256))
		bufs[i][1] = putBytes(t, b, make([]byte, 256))
	}
	for dst := range 2 {
		src := 1 - dst
		m.Device(dst).FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		m.Device(dst).FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
		err := core.CopyPeer(bs[dst], bs[src], []core.PeerCopy{{Dst: bufs[dst][1], Src: bufs[src][0], Len: 256}})
		require.ErrorIs(t, err, core.ErrDriver)
	}
	for i := range 2 {
		m.Device(i).FailRate(int64(i), 0.5, sim.OpStreamSynchronize)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := bs[w%2]
			for range 20 {
				_ = b.Free(bufs[w%2][0]) // retries both quarantines; may or may not succeed yet
				_, _ = b.Download(bufs[w%2][1].All(), nil)
			}
		}()
	}
	wg.Wait()
	for i := range 2 {
		m.Device(i).ClearFaults()
	}
	for i, b := range bs {
		if err := b.Free(bufs[i][0]); err != nil {
			require.ErrorIs(t, err, core.ErrUnknownHandle, "freed by a goroutine above")
		}
		assert.Equal(t, bytes.Repeat([]byte{byte(2 - i)}, 256), getBytes(t, b, bufs[i][1]), "the queued copy into Backend %d ran", i)
		require.NoError(t, b.Free(bufs[i][1]))
	}
	for _, b := range bs {
		assert.Zero(t, b.LaunchResourceCounts().Quarantined)
		require.NoError(t, b.Close())
	}
}
