package transfer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/fusion"
)

// fakeDriver is the part of a driver.Driver the queueing calls: a DMA
// copies its bytes into dev (device addresses from devBase) at once, as a
// stream that runs each copy as it is queued; failOn fails that DMA
// (1-based) and every later one. The other methods are not implemented.
type fakeDriver struct {
	driver.Driver
	devBase  uint64
	dev      []byte
	dmas     int
	failOn   int
	queries  int
	syncs    int
	queryErr error
	doneAt   int // StreamQuery reports done from this call on
}

var errFake = errors.New("fake driver failure")

func (d *fakeDriver) MemcpyHtoDAsync(dst uint64, src []byte, _ driver.Stream) error {
	d.dmas++
	if d.failOn > 0 && d.dmas >= d.failOn {
		return errFake
	}
	if dst < d.devBase || dst-d.devBase+uint64(len(src)) > uint64(len(d.dev)) {
		return fmt.Errorf("DMA of %d bytes to %#x outside the device buffer", len(src), dst)
	}
	copy(d.dev[dst-d.devBase:], src)
	return nil
}

func (d *fakeDriver) StreamQuery(driver.Stream) (bool, error) {
	d.queries++
	return d.queries >= d.doneAt, d.queryErr
}

func (d *fakeDriver) StreamSynchronize(driver.Stream) error {
	d.syncs++
	return nil
}

// packedUpload lays out pieces of the given lengths, filled with distinct
// bytes, and returns the copies, the layout, the staging block and the fill
// that packs pieces [lo, hi) with their table entries (PackFill, counting
// each fill).
func packedUpload(lens []int, devBase uint64, fills *atomic.Int32) ([]fusion.UploadCopy, Layout, []byte, func(lo, hi int)) {
	fused := make([]fusion.UploadCopy, len(lens))
	lay := NewLayout(len(lens), func(i int) int { return lens[i] })
	for i, n := range lens {
		data := make([]byte, n)
		for k := range data {
			data[k] = byte(i*31 + k*7 + 1)
		}
		fused[i] = fusion.UploadCopy{Dst: devBase + uint64(1<<30+i<<20), Data: data}
	}
	stage := make([]byte, lay.Total)
	pack := PackFill(&Tuning{}, &lay, stage, fused, true)
	fill := func(lo, hi int) {
		fills.Add(1)
		pack(lo, hi)
	}
	return fused, lay, stage, fill
}

// QueuePacked moves the whole block (pieces and table) to the device, in
// one DMA for one part and in one DMA per non-empty part otherwise, each
// DMA taken when its bytes were already packed (the fake copies them as it
// is queued), and reports the DMAs it queued.
func TestQueuePackedMovesEveryPackedByteOnce(t *testing.T) {
	const base = 1 << 40
	for _, tc := range []struct {
		lens         []int
		parts, w     int
		wantMostDMAs int
	}{
		{[]int{16, 4096, 3, 70000}, 1, 1, 1},
		{[]int{16, 4096, 3, 70000}, 1, 4, 1},
		{[]int{4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}, 3, 4, 3},
		{[]int{1, 2, 3}, 3, 2, 3},
		{[]int{100000, 1, 1, 1, 1, 1, 1}, 5, 8, 5},
	} {
		t.Run(fmt.Sprintf("%d pieces in %d parts on %d", len(tc.lens), tc.parts, tc.w), func(t *testing.T) {
			var fills atomic.Int32
			fused, lay, stage, fill := packedUpload(tc.lens, base, &fills)
			drv := &fakeDriver{devBase: base, dev: make([]byte, lay.Total)}
			tu := Tuning{}.WithDefaults()
			dmas, call, err := QueuePacked(drv, &tu, &lay, stage, base, 0, fused, tc.parts, tc.w, fill)
			require.NoError(t, err)
			assert.Empty(t, call)
			assert.Equal(t, stage, drv.dev, "the device holds the whole block")
			assert.Equal(t, uint64(drv.dmas), dmas)
			assert.LessOrEqual(t, dmas, uint64(tc.wantMostDMAs))
			assert.Positive(t, fills.Load())
			assert.Zero(t, drv.syncs, "no fence unless SyncEach")
		})
	}
}

// A failed DMA is reported as the call that failed, and every fill has
// returned when QueuePacked does.
func TestQueuePackedReportsAFailedDMA(t *testing.T) {
	const base = 1 << 40
	lens := make([]int, 64)
	for i := range lens {
		lens[i] = 4096
	}
	var fills, running atomic.Int32
	fused, lay, stage, fill := packedUpload(lens, base, &fills)
	counted := func(lo, hi int) {
		running.Add(1)
		defer running.Add(-1)
		time.Sleep(10 * time.Microsecond)
		fill(lo, hi)
	}
	for _, parts := range []int{1, 4} {
		drv := &fakeDriver{devBase: base, dev: make([]byte, lay.Total), failOn: 2}
		if parts == 1 {
			drv.failOn = 1
		}
		tu := Tuning{}.WithDefaults()
		dmas, call, err := QueuePacked(drv, &tu, &lay, stage, base, 0, fused, parts, 4, counted)
		require.ErrorIs(t, err, errFake, "parts %d", parts)
		assert.Equal(t, "MemcpyHtoDAsync", call)
		assert.Zero(t, dmas)
		assert.Zero(t, running.Load(), "parts %d: a fill still runs", parts)
	}
}

// Step fences only under SyncEach and ends its phase either way; Fence
// polls StreamQuery for up to FenceSpin, then synchronizes, and reports a
// failed query as such.
func TestStepAndFence(t *testing.T) {
	var phases []string
	defer SetPhaseHook(func(p string) { phases = append(phases, p) })()
	drv := &fakeDriver{}
	tu := Tuning{}
	require.NoError(t, tu.Step(drv, 0, "dma"))
	tu.SyncEach = true
	require.NoError(t, tu.Step(drv, 0, "launch"))
	assert.Equal(t, []string{"dma", "launch"}, phases)
	assert.Equal(t, 1, drv.syncs)

	tu = Tuning{FenceSpin: -1}
	call, err := tu.Fence(drv, 0)
	require.NoError(t, err)
	assert.Equal(t, "StreamSynchronize", call)
	assert.Zero(t, drv.queries, "no polling when FenceSpin < 0")

	drv = &fakeDriver{doneAt: 3}
	tu = Tuning{FenceSpin: time.Second}
	_, err = tu.Fence(drv, 0)
	require.NoError(t, err)
	assert.Equal(t, 3, drv.queries, "polls until the stream is done")
	assert.Equal(t, 1, drv.syncs)

	drv = &fakeDriver{queryErr: errFake}
	call, err = tu.Fence(drv, 0)
	require.ErrorIs(t, err, errFake)
	assert.Equal(t, "StreamQuery", call)
	assert.Zero(t, drv.syncs)
}

// StageUploads lays the uploads out back to back, on any number of
// goroutines, with either kind of store, touching nothing past them.
func TestStageUploadsPacksBackToBack(t *testing.T) {
	for _, lens := range [][]int{{5000}, {1, 2, 3}, {4096, 0, 333, 70000, 16}} {
		for _, w := range []int{1, 3, 16} {
			for _, plain := range []bool{false, true} {
				var want []byte
				fused := make([]fusion.UploadCopy, len(lens))
				for i, n := range lens {
					fused[i].Data = make([]byte, n)
					for k := range fused[i].Data {
						fused[i].Data[k] = byte(i + k*3 + 1)
					}
					want = append(want, fused[i].Data...)
				}
				stage := make([]byte, len(want)+8)
				for i := range stage {
					stage[i] = 0xEE
				}
				tu := Tuning{PlainStage: plain}.WithDefaults()
				StageUploads(&tu, stage[:len(want)], fused, w)
				assert.Equal(t, want, stage[:len(want)], "lens %v w %d plain %v", lens, w, plain)
				assert.Equal(t, []byte{0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE}, stage[len(want):])
			}
		}
	}
}

// PackFill puts each piece at its place in the block, with either kind of
// store, and its table entries only when asked: without them the table
// stays as it was.
func TestPackFillPlacesPiecesAndEntries(t *testing.T) {
	lens := []int{5, 4096, 0, 17}
	var fills atomic.Int32
	fused, lay, want, fill := packedUpload(lens, 1<<40, &fills)
	fill(0, len(lens))
	for _, plain := range []bool{false, true} {
		for _, entries := range []bool{false, true} {
			stage := make([]byte, lay.Total)
			PackFill(&Tuning{PlainPack: plain}, &lay, stage, fused, entries)(0, len(lens))
			assert.Equal(t, want[:lay.Table], stage[:lay.Table], "plain %v entries %v: pieces", plain, entries)
			if entries {
				assert.Equal(t, want[lay.Table:], stage[lay.Table:], "plain %v: table", plain)
			} else {
				assert.Equal(t, make([]byte, lay.Total-lay.Table), stage[lay.Table:], "plain %v: no table", plain)
			}
		}
	}
}
