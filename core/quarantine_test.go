package core_test

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

const qLen = 64

// quarantineCase is one call that drains or quarantines its streams
// (transfer.Engine.SyncOrQuarantine) after a failure, made to fail in
// its work and again in the drain that follows.
type quarantineCase struct {
	name string
	opts []core.Option
	arm  func(d *sim.Device)
	// call moves data into h (uploads) or reads h (readbacks, returning
	// its bytes).
	call func(t *testing.T, b *core.Backend, h core.Buffer, data []byte) ([]byte, error)
	// want is h's bytes once the quarantined work ran, from its bytes
	// before the call and the call's data; nil for readbacks. done is h's
	// bytes after the call succeeds (nil: data).
	want, done func(before, data []byte) []byte
	// staged: the call holds pinned (and devStaged: device) staging that
	// its queued work may still use.
	staged, devStaged bool
	// idle: the failed call's stream holds no work (a fresh stream whose
	// only copy failed to queue), so nothing but the lease is held.
	idle bool
}

var (
	failBoth = func(op sim.Op, n int) func(d *sim.Device) {
		return func(d *sim.Device) {
			d.FailNth(op, n, cudaapi.CUDA_ERROR_UNKNOWN)
			if op == sim.OpStreamSynchronize {
				d.FailNth(op, n+1, cudaapi.CUDA_ERROR_UNKNOWN)
			} else {
				d.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			}
		}
	}
	upload = func(t *testing.T, b *core.Backend, h core.Buffer, data []byte) ([]byte, error) {
		return nil, b.Upload(core.UploadAt{Buf: h, Data: data})
	}
	download = func(t *testing.T, b *core.Backend, h core.Buffer, _ []byte) ([]byte, error) {
		return b.Download(h.All(), nil)
	}
	twoRanges = func(t *testing.T, b *core.Backend, h core.Buffer, data []byte) ([]byte, error) {
		return nil, b.Upload(core.UploadAt{Buf: h, Data: data[:8]}, core.UploadAt{Buf: h, Offset: 32, Data: data[32:40]})
	}
	twoRangesWant = func(before, data []byte) []byte {
		w := bytes.Clone(before)
		copy(w, data[:8])
		copy(w[32:], data[32:40])
		return w
	}
	whole     = func(_, data []byte) []byte { return data }
	unchanged = func(before, _ []byte) []byte { return before }
	runBatch  = func(t *testing.T, b *core.Backend, h core.Buffer, data []byte) ([]byte, error) {
		pd, err := b.RunAsync(core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: data}}, Reads: []core.Range{{Buf: h, Len: h.Len}}})
		if err != nil {
			return nil, err
		}
		defer func() { assert.NoError(t, pd.Close()) }()
		out, err := pd.AwaitInto(nil)
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	packing  = core.WithTransferTuning(core.TransferTuning{PackMinCopies: 2, PipelineMinBytes: -1})
	pipeline = core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1, PipelineMinBytes: 32, ChunkBytes: 16, Blocks: 2})
)

func quarantineCases() []quarantineCase {
	return []quarantineCase{
		{name: "upload fence", arm: failBoth(sim.OpStreamSynchronize, 1), call: upload, want: whole, staged: true},
		{name: "upload second copy", opts: []core.Option{noPacking}, arm: failBoth(sim.OpMemcpyHtoDAsync, 2),
			call: twoRanges, want: func(before, data []byte) []byte { w := bytes.Clone(before); copy(w, data[:8]); return w },
			done: twoRangesWant, staged: true},
		{name: "readback fence", arm: failBoth(sim.OpStreamSynchronize, 1), call: download, staged: true},
		{name: "readback copy", opts: []core.Option{noPacking}, arm: failBoth(sim.OpMemcpyDtoHAsync, 2),
			call: func(t *testing.T, b *core.Backend, h core.Buffer, _ []byte) ([]byte, error) {
				_, err := b.DownloadMany([]core.Range{{Buf: h, Len: 8}, {Buf: h, Offset: 32, Len: 8}}, nil)
				return nil, err
			}, staged: true},
		{name: "packed upload fence", opts: []core.Option{packing}, arm: failBoth(sim.OpStreamSynchronize, 1),
			call: twoRanges, want: twoRangesWant, done: twoRangesWant, staged: true, devStaged: true},
		{name: "packed upload launch", opts: []core.Option{packing}, arm: failBoth(sim.OpLaunch, 1),
			call: twoRanges, want: unchanged, done: twoRangesWant, staged: true, devStaged: true},
		{name: "packed gather fence", opts: []core.Option{packing}, arm: failBoth(sim.OpStreamSynchronize, 1),
			call: func(t *testing.T, b *core.Backend, h core.Buffer, _ []byte) ([]byte, error) {
				_, err := b.DownloadMany([]core.Range{{Buf: h, Len: 8}, {Buf: h, Offset: 32, Len: 8}}, nil)
				return nil, err
			}, staged: true, devStaged: true},
		// Every chunk's DMA is queued on one stream: its fence and the drain
		// after it fail, and the retry runs what was still queued.
		{name: "pipelined upload fence", opts: []core.Option{pipeline}, arm: failBoth(sim.OpStreamSynchronize, 1),
			call: upload, want: whole, staged: true},
		// The first chunk's event query fails, and so does the drain.
		{name: "pipelined download event", opts: []core.Option{pipeline}, arm: failBoth(sim.OpEventQuery, 1),
			call: download, staged: true},
		{name: "batch event record", arm: failBoth(sim.OpEventRecord, 1), call: runBatch, want: whole, staged: true},
		{name: "pending fence", arm: failBoth(sim.OpStreamSynchronize, 1), call: runBatch, want: whole, staged: true},
		{name: "async upload copy", arm: failBoth(sim.OpMemcpyHtoDAsync, 1),
			call: func(t *testing.T, b *core.Backend, h core.Buffer, data []byte) ([]byte, error) {
				pb, err := b.AllocHostPinned(len(data))
				require.NoError(t, err)
				defer func() { assert.NoError(t, pb.Free()) }()
				copy(pb.Bytes(), data)
				if err := b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: pb.Bytes()[:len(data)]}); err != nil {
					return nil, err
				}
				return nil, b.SynchronizeUploads()
			}, want: unchanged, idle: true},
	}
}

// quarantineSetup opens a Backend on sim with two buffers of qLen random
// bytes, written straight into device memory.
func quarantineSetup(t *testing.T, opts []core.Option) (*sim.Device, *core.Backend, [2]core.Buffer, [2][]byte) {
	t.Helper()
	dev := sim.New(sim.Config{TotalMemory: 32 << 20})
	b, err := core.Open(dev, append([]core.Option{core.WithLogger(quietLogger)}, opts...)...)
	require.NoError(t, err)
	r := rand.New(rand.NewSource(1))
	var hs [2]core.Buffer
	var init [2][]byte
	for i := range hs {
		hs[i], err = b.Alloc(qLen)
		require.NoError(t, err)
		init[i] = randomBytes(r, qLen)
		ptr, err := b.ResidentDevicePtr(hs[i])
		require.NoError(t, err)
		require.NoError(t, dev.WriteDevice(ptr, init[i]))
	}
	return dev, b, hs, init
}

// outsidePools returns the pinned and device bytes live on dev that the
// Backend's pools do not cache.
func outsidePools(b *core.Backend, dev *sim.Device) (pinned, device uint64) {
	l := dev.Live()
	dc, hc := b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned
	return l.PinnedBytes - hc, l.DeviceBytes - dc
}

// TestFailedDrainQuarantinesUntilASyncSucceeds: for every caller of drain,
// the work fails and so does the drain after it. The lease and what its
// work may use are quarantined (not back in the pools), the buffer it
// targets cannot be freed while the fault lasts, a later call (faults gone)
// releases the quarantine after its queued work ran on the staging it was
// queued with (an upload of other bytes in between would have reused a
// recycled block), and Close leaves nothing behind.
func TestFailedDrainQuarantinesUntilASyncSucceeds(t *testing.T) {
	for _, tc := range quarantineCases() {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, init := quarantineSetup(t, tc.opts)
			r := rand.New(rand.NewSource(2))
			a, other := randomBytes(r, qLen), randomBytes(r, qLen)
			pin0, dev0 := outsidePools(b, dev)

			tc.arm(dev)
			_, err := tc.call(t, b, hs[0], a)
			require.ErrorIs(t, err, core.ErrDriver)
			require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
			pin1, dev1 := outsidePools(b, dev)
			if tc.staged {
				assert.Greater(t, pin1, pin0, "pinned staging its work may use stays out of the pool")
			}
			if tc.devStaged {
				assert.Greater(t, dev1, dev0, "device staging its work may use stays out of the pool")
			}
			if !tc.idle {
				// The target stays in flight while the stream cannot be synchronized.
				dev.FailRate(1, 1, sim.OpStreamSynchronize)
				assert.ErrorIs(t, b.Free(hs[0]), core.ErrInFlight)
			}
			dev.ClearFaults()

			// Same shape of call on the other buffer: it would take a
			// recycled staging block, and its lease retries the quarantine.
			got, err := tc.call(t, b, hs[1], other)
			require.NoError(t, err)
			assert.Zero(t, b.LaunchResourceCounts().Quarantined)
			if tc.want != nil {
				assert.Equal(t, tc.want(init[0], a), simBytes(t, b, dev, hs[0]), "the quarantined work ran on its own staging")
				done := whole
				if tc.done != nil {
					done = tc.done
				}
				assert.Equal(t, done(init[1], other), simBytes(t, b, dev, hs[1]))
			} else if got != nil {
				assert.Equal(t, init[1], got[:qLen])
			}
			pin2, dev2 := outsidePools(b, dev)
			assert.Equal(t, pin0, pin2, "every staging block is back")
			assert.Equal(t, dev0, dev2, "every device staging allocation is back")
			require.NoError(t, b.Free(hs[0]))
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}

// TestCloseReleasesTheQuarantineOnceItSynchronizes: Close itself retries
// the quarantine and, with the fault gone, releases everything.
func TestCloseReleasesTheQuarantineOnceItSynchronizes(t *testing.T) {
	for _, tc := range quarantineCases() {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, _ := quarantineSetup(t, tc.opts)
			a := randomBytes(rand.New(rand.NewSource(3)), qLen)
			tc.arm(dev)
			_, err := tc.call(t, b, hs[0], a)
			require.ErrorIs(t, err, core.ErrDriver)
			dev.ClearFaults()
			require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}

// TestCloseReportsAQuarantineThatNeverSynchronizes: when the stream still
// cannot be synchronized at Close, Close releases everything else, leaves
// the memory the work may touch allocated and fails with ErrDriver saying
// so; the Backend is closed either way.
func TestCloseReportsAQuarantineThatNeverSynchronizes(t *testing.T) {
	for _, tc := range quarantineCases() {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, _ := quarantineSetup(t, tc.opts)
			tc.arm(dev)
			_, err := tc.call(t, b, hs[0], make([]byte, qLen))
			require.ErrorIs(t, err, core.ErrDriver)
			dev.FailRate(1, 1, sim.OpStreamSynchronize)

			err = b.Close()
			require.ErrorIs(t, err, core.ErrDriver)
			var ce *core.Error
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, "Close", ce.Op)
			assert.Contains(t, ce.Detail, "could not be synchronized")
			assert.Contains(t, ce.Fix, "context")
			assert.ErrorIs(t, b.Close(), core.ErrClosed)
			assert.Zero(t, b.LaunchResourceCounts().Leases)

			l := dev.Live()
			assert.Zero(t, l.Events, "events are released")
			if tc.idle {
				assert.True(t, l.Zero(), "a stream without work is destroyed: %s", l)
				return
			}
			assert.Equal(t, 1, l.Streams, "the sim refuses to destroy a stream with queued work")
			assert.NotZero(t, l.QueuedOps)
			assert.Equal(t, 1, l.Allocations-map[bool]int{false: 0, true: 1}[tc.devStaged],
				"only the buffer the work may use (and device staging) is left allocated")
			if tc.staged {
				assert.NotZero(t, l.PinnedBuffers, "staging the work may use is left allocated")
			}
		})
	}
}

// TestDirectCopyQuarantineReleasesThePinnedSource: a direct upload and a
// direct readback from memory pinned through the Backend fail, and so does
// the drain. While the stream cannot be synchronized the pinned memory
// stays busy; once a later call releases the quarantine, it can be freed.
func TestDirectCopyQuarantineReleasesThePinnedSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error
	}{
		{"upload", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			return b.Upload(core.UploadAt{Buf: h, Data: p.Bytes()})
		}},
		{"readback", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			_, err := b.Download(h.All(), p.Bytes()[:0])
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, _ := quarantineSetup(t, nil)
			p, err := b.AllocHostPinned(qLen)
			require.NoError(t, err)

			dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
			require.ErrorIs(t, tc.call(b, hs[0], p), core.ErrDriver)
			require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
			dev.FailRate(1, 1, sim.OpStreamSynchronize)
			assert.ErrorIs(t, p.Free(), core.ErrInFlight, "the DMA may still use the pinned memory")
			dev.ClearFaults()

			require.NoError(t, tc.call(b, hs[1], p), "a later call releases the quarantine")
			assert.Zero(t, b.LaunchResourceCounts().Quarantined)
			require.NoError(t, p.Free(), "the quarantine gave the pinned memory back")
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}
