package core_test

// Batch.Into and the direct DMA of memory pinned through the Backend in
// batches (Batch doc): Into's validation, and the pinned memory a batch's
// direct copies use staying in flight until the work is collected.

import (
	"bytes"
	"errors"
	"math/rand"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// intoSetup opens a Backend with a buffer of 64 random bytes, a pinned
// buffer of 256 bytes and a Go slice of 256 bytes pinned with
// PinHostBuffer (unpinned at cleanup if the test left it pinned).
func intoSetup(t *testing.T, opts ...core.Option) (*core.Backend, *sim.Device, core.Buffer, []byte, *core.PinnedBuffer, []byte) {
	t.Helper()
	b, dev := openSim(t, sim.Config{}, opts...)
	h, err := b.Alloc(64)
	require.NoError(t, err)
	init := randomBytes(rand.New(rand.NewSource(21)), 64)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: init}))
	p, err := b.AllocHostPinned(256)
	require.NoError(t, err)
	reg := make([]byte, 256)
	require.NoError(t, b.PinHostBuffer(unsafe.Pointer(&reg[0]), len(reg)))
	t.Cleanup(func() {
		_ = b.UnpinHostBuffer(unsafe.Pointer(&reg[0]))
		runtime.KeepAlive(reg)
	})
	return b, dev, h, init, p, reg
}

// TestBatchIntoRefusals: Into with a count other than the reads', or an
// entry whose length is not its read's, fails Run, RunAsync and Capture
// with ErrInvalidArgument naming the numbers, before anything reaches the
// device: no driver call, no telemetry, the buffer's bytes, Run's dst and
// every Into slice unchanged, and nothing left in flight (the buffer and
// the pinned memory the batch's direct upload would have read can be
// freed).
func TestBatchIntoRefusals(t *testing.T) {
	cases := []struct {
		name  string
		reads []core.Range // over h (64 bytes)
		into  func(p *core.PinnedBuffer, reg []byte) [][]byte
		frags []string
	}{
		{"more destinations than reads", []core.Range{{Len: 8}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{p.Bytes()[64:72], nil} },
			[]string{"Into has 2 destinations for 1 reads"}},
		{"fewer destinations than reads", []core.Range{{Len: 8}, {Offset: 8, Len: 8}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{reg[:8]} },
			[]string{"Into has 1 destinations for 2 reads"}},
		{"destinations without reads", nil,
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{nil} },
			[]string{"Into has 1 destinations for 0 reads"}},
		{"a destination too short", []core.Range{{Len: 8}, {Offset: 8, Len: 16}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{nil, p.Bytes()[64:79]} },
			[]string{"read 1", "Into holds 15 bytes for a read of 16"}},
		{"a destination too long", []core.Range{{Len: 8}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{make([]byte, 9)} },
			[]string{"read 0", "Into holds 9 bytes for a read of 8"}},
		{"an empty destination for a read", []core.Range{{Len: 4}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{reg[:0]} },
			[]string{"read 0", "Into holds 0 bytes for a read of 4"}},
		{"a destination for an empty read", []core.Range{{Len: 0}, {Len: 4}},
			func(p *core.PinnedBuffer, reg []byte) [][]byte { return [][]byte{reg[:1], reg[8:12]} },
			[]string{"read 0", "Into holds 1 bytes for a read of 0"}},
	}
	for _, tc := range cases {
		for _, call := range []string{"Run", "RunAsync", "Capture"} {
			t.Run(tc.name+"/"+call, func(t *testing.T) {
				b, dev, h, init, p, reg := intoSetup(t)
				fill := func(s []byte, v byte) {
					for i := range s {
						s[i] = v
					}
				}
				fill(p.Bytes(), 0x5a)
				fill(reg, 0xc3)
				pinnedBefore, regBefore := bytes.Clone(p.Bytes()), bytes.Clone(reg)
				batch := core.Batch{
					Fills:   []core.Fill{{Buf: h, Value: 7}},
					Uploads: []core.UploadAt{{Buf: h, Offset: 32, Data: p.Bytes()[:16]}}, // direct, were it valid
					Into:    tc.into(p, reg),
				}
				for _, r := range tc.reads {
					r.Buf = h
					batch.Reads = append(batch.Reads, r)
				}
				goInto := make([][]byte, len(batch.Into))
				for i, d := range batch.Into {
					goInto[i] = bytes.Clone(d)
				}
				dst := [][]byte{[]byte("keep")}
				calls, tel := dev.CallCounts(), b.Telemetry()

				err := submitRefused(t, b, call, batch, dst)
				ce := requireErrKind(t, err, core.ErrInvalidArgument, tc.frags...)
				assert.Equal(t, call, ce.Op)
				assert.Equal(t, 1, strings.Count(err.Error(), "Fix: "))

				assert.Equal(t, calls, dev.CallCounts(), "a refused batch makes no driver call")
				assert.Equal(t, tel, b.Telemetry())
				assert.Equal(t, "keep", string(dst[0]))
				for i, d := range batch.Into {
					assert.Equal(t, goInto[i], []byte(d), "Into[%d] unchanged", i)
				}
				assert.Equal(t, pinnedBefore, p.Bytes())
				assert.Equal(t, regBefore, reg)
				assert.Equal(t, init, simBytes(t, b, dev, h), "the fill and the upload did not run")
				require.NoError(t, b.Free(h), "the buffer is not left in flight")
				require.NoError(t, p.Free(), "the direct upload's pinned memory is not left in use")
				require.NoError(t, b.UnpinHostBuffer(unsafe.Pointer(&reg[0])))
			})
		}
	}
}

// submitRefused submits batch with call (Run into dst, RunAsync or
// Capture), which must hand back nothing but its error.
func submitRefused(t *testing.T, b *core.Backend, call string, batch core.Batch, dst [][]byte) error {
	t.Helper()
	switch call {
	case "Run":
		out, err := b.Run(batch, dst)
		assert.Equal(t, [][]byte{[]byte("keep")}, out, "Run returns dst unchanged")
		return err
	case "RunAsync":
		pd, err := b.RunAsync(batch)
		assert.Nil(t, pd)
		return err
	}
	g, err := b.Capture(batch)
	assert.Nil(t, g)
	return err
}

// TestBatchIntoAcceptsNilAndEmpty: nil entries let their reads land as
// usual, an empty non-nil entry serves an empty read, and every other read
// lands in its entry, which becomes its result slot: Go memory, memory
// from AllocHostPinned and memory pinned with PinHostBuffer alike.
func TestBatchIntoAcceptsNilAndEmpty(t *testing.T) {
	b, _, h, init, p, reg := intoSetup(t)
	goDst := make([]byte, 8)
	batch := core.Batch{
		Reads: []core.Range{h.Slice(0, 8), h.Slice(8, 0), h.Slice(8, 8), h.Slice(16, 8), h.Slice(24, 8)},
		Into:  [][]byte{nil, reg[100:100], goDst, p.Bytes()[8:16], reg[16:24]},
	}
	check := func(t *testing.T, out [][]byte) {
		t.Helper()
		require.Len(t, out, 5)
		assert.Equal(t, init[:8], out[0])
		assert.Empty(t, out[1])
		for i := 2; i < 5; i++ {
			assert.Equal(t, init[8*(i-1):8*i], out[i], "read %d", i)
			assert.Equal(t, unsafe.SliceData(batch.Into[i]), unsafe.SliceData(out[i]), "read %d's slot is its Into", i)
			assert.Len(t, out[i], 8)
		}
	}
	out, err := b.Run(batch, nil)
	require.NoError(t, err)
	check(t, out)

	pd, err := b.RunAsync(batch)
	require.NoError(t, err)
	out, err = pd.AwaitInto(nil)
	require.NoError(t, err)
	check(t, out)

	g, err := b.Capture(batch)
	require.NoError(t, err)
	out, err = g.Replay(nil)
	require.NoError(t, err)
	check(t, out)
	require.NoError(t, g.Close())
	require.NoError(t, p.Free())
}

// pinnedUse is a batch whose upload (from p) and read (into reg) are
// direct DMAs, and the checks of the memory they use.
type pinnedUse struct {
	b     *core.Backend
	h     core.Buffer
	p     *core.PinnedBuffer
	reg   []byte
	batch core.Batch
}

func newPinnedUse(t *testing.T, reads bool) (*pinnedUse, []byte) {
	b, _, h, _, p, reg := intoSetup(t)
	data := randomBytes(rand.New(rand.NewSource(22)), 32)
	copy(p.Bytes(), data)
	u := &pinnedUse{b: b, h: h, p: p, reg: reg,
		batch: core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: p.Bytes()[:32]}}}}
	if reads {
		u.batch.Reads = []core.Range{h.Slice(0, 32)}
		u.batch.Into = [][]byte{reg[:32]}
	}
	return u, data
}

// busy asserts both pinned regions refuse to be released (what names the
// moment). Refusals change nothing.
func (u *pinnedUse) busy(t *testing.T, what string, reg bool) {
	t.Helper()
	// The message names what the caller must collect.
	requireErrKind(t, u.p.Free(), core.ErrInFlight, "PinnedBuffer.Free", "collect the Pending", "Close the Graph")
	if reg {
		requireErrKind(t, u.b.UnpinHostBuffer(unsafe.Pointer(&u.reg[0])), core.ErrInFlight, "UnpinHostBuffer",
			"collect the Pending", "Close the Graph")
	}
	assert.Len(t, u.p.Bytes(), 256, "%s: a refused Free keeps the buffer", what)
}

// release frees and unpins both regions: they must no longer be in use.
func (u *pinnedUse) release(t *testing.T) {
	t.Helper()
	require.NoError(t, u.p.Free())
	require.NoError(t, u.b.UnpinHostBuffer(unsafe.Pointer(&u.reg[0])))
	require.NoError(t, u.b.Free(u.h))
}

// TestBatchPinnedMemoryInFlightUntilCollected: the pinned memory a
// batch's direct copies read and write stays in flight until the work is
// collected, whichever way it is, and can always be released after that.
// A Pending with reads is collected by AwaitInto or Close (IsReady and
// Await only settle it: the buffers leave flight, the pinned memory not);
// one without reads as soon as it is observed finished; a Graph holds it
// until Close, across its replays.
func TestBatchPinnedMemoryInFlightUntilCollected(t *testing.T) {
	t.Run("AwaitInto", func(t *testing.T) {
		u, data := newPinnedUse(t, true)
		pd, err := u.b.RunAsync(u.batch)
		require.NoError(t, err)
		u.busy(t, "queued", true)
		requireErrKind(t, u.b.Free(u.h), core.ErrInFlight)
		ready, err := pd.IsReady()
		require.NoError(t, err)
		require.True(t, ready)
		assert.Equal(t, data, u.reg[:32], "the read landed in Into before collection")
		u.busy(t, "settled, reads uncollected", true)
		require.NoError(t, pd.Await())
		u.busy(t, "awaited, reads uncollected", true)
		out, err := pd.AwaitInto(nil)
		require.NoError(t, err)
		assert.Equal(t, unsafe.SliceData(u.reg), unsafe.SliceData(out[0]))
		u.release(t)
	})
	t.Run("Close drops the reads", func(t *testing.T) {
		u, _ := newPinnedUse(t, true)
		pd, err := u.b.RunAsync(u.batch)
		require.NoError(t, err)
		u.busy(t, "queued", true)
		require.NoError(t, pd.Close())
		u.release(t)
	})
	t.Run("Await without reads", func(t *testing.T) {
		u, data := newPinnedUse(t, false)
		pd, err := u.b.RunAsync(u.batch)
		require.NoError(t, err)
		u.busy(t, "queued", false)
		require.NoError(t, pd.Await())
		got, err := u.b.Download(u.h.Slice(0, 32), nil)
		require.NoError(t, err)
		assert.Equal(t, data, got)
		u.release(t)
	})
	t.Run("Graph until Close", func(t *testing.T) {
		u, _ := newPinnedUse(t, true)
		g, err := u.b.Capture(u.batch)
		require.NoError(t, err)
		u.busy(t, "captured", true)
		for i := range 2 {
			copy(u.p.Bytes(), randomBytes(rand.New(rand.NewSource(int64(30+i))), 32))
			out, err := g.Replay(nil)
			require.NoError(t, err)
			assert.Equal(t, u.p.Bytes()[:32], out[0], "replay %d reads the pinned Data as it is now", i)
			u.busy(t, "replayed", true)
		}
		pd, err := g.ReplayAsync()
		require.NoError(t, err)
		requireErrKind(t, g.Close(), core.ErrInFlight)
		_, err = pd.AwaitInto(nil)
		require.NoError(t, err)
		u.busy(t, "replay collected, graph open", true)
		requireErrKind(t, u.b.Close(), core.ErrInFlight)
		require.NoError(t, g.Close())
		u.release(t)
	})
	t.Run("dropped Pending", func(t *testing.T) {
		u, _ := newPinnedUse(t, true)
		func() {
			_, err := u.b.RunAsync(u.batch)
			require.NoError(t, err)
		}()
		var err error
		for range 200 {
			runtime.GC()
			if err = u.p.Free(); !errors.Is(err, core.ErrInFlight) {
				break
			}
			time.Sleep(time.Millisecond) // let the cleanup goroutine run
		}
		require.NoError(t, err, "the garbage collector's cleanup released the pinned memory")
		require.NoError(t, u.b.UnpinHostBuffer(unsafe.Pointer(&u.reg[0])))
		require.NoError(t, u.b.Free(u.h))
	})
}
