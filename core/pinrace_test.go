package core_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestFreeInsideThePinWindow forces the interleaving a race
// detector and a stress test only hit by luck: a Free of a buffer
// that a call has validated but not yet marked in flight. The pin hook runs
// in exactly that window; when Free could take the resident table
// there (the window is open), the hook frees the buffer synchronously. The
// contract: a buffer used by queued work is never freed under it, so that
// Free must be refused with ErrInFlight; if the window is closed
// (the table is held), the free is tried once the call has returned, when
// the queued work still holds the buffer, with the same answer. Either way
// the work then completes on the buffer and the buffer frees afterwards.
// Synchronous calls pin too (their window is the same); they hold nothing
// once they return.
func TestFreeInsideThePinWindow(t *testing.T) {
	for _, tc := range []struct {
		name string
		// start queues work on h that holds it until finish runs.
		start  func(b *core.Backend, h core.Buffer, src []byte) (finish func() error, err error)
		expect func(data []byte) []byte
	}{
		{"UploadAsync", func(b *core.Backend, h core.Buffer, src []byte) (func() error, error) {
			err := b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: src})
			return b.SynchronizeUploads, err
		}, func(data []byte) []byte { return data }},
		{"DispatchAsync", func(b *core.Backend, h core.Buffer, _ []byte) (func() error, error) {
			p, err := b.DispatchAsync(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{0x01010101}})
			if err != nil {
				return nil, err
			}
			return p.Await, nil
		}, func(data []byte) []byte { return bytes.Repeat([]byte{1}, len(data)) }},
		{"Download", func(b *core.Backend, h core.Buffer, _ []byte) (func() error, error) {
			_, err := b.Download(h.All(), nil)
			return nil, err
		}, nil},
		{"Upload", func(b *core.Backend, h core.Buffer, src []byte) (func() error, error) {
			return nil, b.Upload(core.UploadAt{Buf: h, Data: src})
		}, nil},
		{"RunAsync", func(b *core.Backend, h core.Buffer, _ []byte) (func() error, error) {
			p, err := b.RunAsync(core.Batch{Fills: []core.Fill{{Buf: h, Value: 7}}})
			if err != nil {
				return nil, err
			}
			return p.Await, nil
		}, func(data []byte) []byte { return bytes.Repeat([]byte{7}, len(data)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{})
			h, err := b.Alloc(256)
			require.NoError(t, err)
			pb, err := b.AllocHostPinned(256)
			require.NoError(t, err)
			src := pb.Bytes()
			for i := range src {
				src[i] = byte(i*7 + 1)
			}

			var inWindow error
			open, fired := false, false
			restore := core.SetPinHookForTest(b, func() {
				if fired {
					return
				}
				fired = true
				if open = core.ResidentStoreFreeForTest(b); open {
					inWindow = b.Free(h)
				}
			})
			finish, err := tc.start(b, h, src)
			restore()
			require.True(t, fired, "the call did not pin its buffer")
			if open {
				require.True(t, errors.Is(inWindow, core.ErrInFlight),
					"Free between validation and the in-flight mark must be refused as in flight; got %v", inWindow)
			}
			require.NoError(t, err, "the call whose buffer a free raced")
			if finish == nil { // a synchronous call: done, nothing holds the buffer
				require.NoError(t, b.Free(h))
				require.NoError(t, pb.Free())
				return
			}
			if !open {
				require.ErrorIs(t, b.Free(h), core.ErrInFlight, "Free while the queued work holds the buffer")
			}
			require.NoError(t, finish())
			got, err := b.Download(h.All(), nil)
			require.NoError(t, err)
			assert.Equal(t, tc.expect(src), got, "the queued work's result")
			require.NoError(t, b.Free(h))
			require.NoError(t, pb.Free())
		})
	}
}
