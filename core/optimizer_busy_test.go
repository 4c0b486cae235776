package core_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestDispatcherFreeInsideTheBackendPin frees a dispatcher buffer from
// inside the Backend's pin of a call that uses it: the moment after the
// Backend validated the handle, before it marks the buffer in flight. When
// the resident table is free there (the window is open) the free must be
// refused as in flight; when it is held, the free runs once the call has
// returned. Either way the call succeeds on the buffer, the buffer then
// frees, and its handle is unknown to every Backend verb afterwards.
func TestDispatcherFreeInsideTheBackendPin(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(b *core.Backend, h core.Buffer) error
	}{
		{"Run", func(b *core.Backend, h core.Buffer) error {
			_, err := b.Run(core.Batch{Fills: []core.Fill{{Buf: h, Value: 9}}, Reads: []core.Range{h.Slice(0, 64)}}, nil)
			return err
		}},
		{"Upload", func(b *core.Backend, h core.Buffer) error {
			return b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4096)})
		}},
		{"Download", func(b *core.Backend, h core.Buffer) error { _, err := b.Download(h.All(), nil); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{})
			d, err := core.NewOptimizerDispatcher(b)
			require.NoError(t, err)
			h, err := d.Alloc(4096)
			require.NoError(t, err)
			var inWindow error
			open, fired := false, false
			restore := core.SetPinHookForTest(b, func() {
				if !fired {
					fired = true
					if open = core.ResidentStoreFreeForTest(b); open {
						inWindow = d.Free(h)
					}
				}
			})
			err = tc.call(b, h)
			restore()
			require.True(t, fired, "the call did not pin through the Backend")
			require.NoError(t, err)
			if open {
				require.True(t, errors.Is(inWindow, core.ErrInFlight), "Free of a buffer a running call uses: %v", inWindow)
			}
			require.NoError(t, d.Free(h))
			requireKind(t, tc.call(b, h), core.ErrUnknownHandle, h.ID)
			require.NoError(t, d.Close())
		})
	}
}

// TestDispatcherBuffersWorkWithEveryVerb: a dispatcher's Buffers are
// ordinary handles while live, refused by Backend.Free, held in flight by
// unfinished work, and unknown once freed, also after a pooled reuse hands
// the same memory out under a new handle.
func TestDispatcherBuffersWorkWithEveryVerb(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	h, err := d.Alloc(64)
	require.NoError(t, err)
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	require.NoError(t, b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{0x05050505}}))
	got, err := b.Download(h.Slice(8, 8), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{5, 5, 5, 5, 5, 5, 5, 5}, got)
	requireKind(t, b.Free(h), core.ErrOwned, h.ID)

	p, err := b.RunAsync(core.Batch{Clears: []core.Buffer{h}})
	require.NoError(t, err)
	requireKind(t, d.Free(h), core.ErrInFlight, h.ID)
	require.NoError(t, p.Await())
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	require.NoError(t, d.Free(h))

	again, err := d.Alloc(64)
	require.NoError(t, err)
	assert.NotEqual(t, h.ID, again.ID, "a pooled buffer comes back under a new handle")
	ptr2, err := b.ResidentDevicePtr(again)
	require.NoError(t, err)
	assert.Equal(t, ptr, ptr2, "the same memory, from the pool")
	calls := dev.CallCounts()
	requireKind(t, b.Upload(core.UploadAt{Buf: h, Data: data}), core.ErrUnknownHandle, h.ID)
	_, err = b.Download(h.All(), nil)
	requireKind(t, err, core.ErrUnknownHandle, h.ID)
	requireKind(t, d.Free(h), core.ErrUnknownHandle, h.ID)
	assert.Equal(t, calls, dev.CallCounts(), "a stale handle reaches nothing")
	require.NoError(t, d.Free(again))
	require.NoError(t, d.Close())
}
