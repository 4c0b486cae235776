package transfer

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
)

// phaseHook, when set (tests only), is called with the name of each phase
// of a transfer as it ends, so a benchmark can time the phases. It is nil
// otherwise: one load and branch per phase.
var phaseHook func(phase string)

// Phase reports the end of the phase name to the hook SetPhaseHook set.
func Phase(name string) {
	if h := phaseHook; h != nil {
		h(name)
	}
}

// SetPhaseHook has f called with each phase's name as it ends and returns
// a function that puts the previous hook back. Not safe while transfers
// run.
func SetPhaseHook(f func(phase string)) (restore func()) {
	old := phaseHook
	phaseHook = f
	return func() { phaseHook = old }
}

// Fence waits for everything queued on s, first polling for up to
// t.FenceSpin, then with StreamSynchronize (which returns at once when the
// polling saw the stream done, and reports any error of its work). On
// failure it returns the failed call's name with the error.
func (t *Tuning) Fence(drv driver.Driver, s driver.Stream) (string, error) {
	if t.FenceSpin > 0 {
		until := time.Now().Add(t.FenceSpin)
		for {
			done, err := drv.StreamQuery(s)
			if err != nil {
				return "StreamQuery", err
			}
			if done || time.Now().After(until) {
				break
			}
		}
	}
	return "StreamSynchronize", drv.StreamSynchronize(s)
}

// Step fences s after a queued operation when t.SyncEach is set (tests
// only), so the phase times hold each operation's device time, and ends
// the phase name.
func (t *Tuning) Step(drv driver.Driver, s driver.Stream, name string) error {
	if t.SyncEach {
		if err := drv.StreamSynchronize(s); err != nil {
			return err
		}
	}
	Phase(name)
	return nil
}

// QueuePacked packs a packed upload's block stage (laid out as lay, for the
// fused copies) and queues its DMAs to device address dev on s. With one
// part the pieces are packed on w goroutines and the whole block (table
// included) goes in one DMA. With several, w goroutines sharing one copy
// job fill the parts in order (fill(lo, hi) packs pieces [lo, hi) and
// whatever table entries the caller leaves to it) and each part's DMA is
// queued as soon as it is packed, so packing later parts overlaps the DMAs
// of earlier ones; the table, complete only then, goes with the last part.
// It returns the DMAs queued, or the failed call and its error.
func QueuePacked(drv driver.Driver, t *Tuning, lay *Layout, stage []byte, dev uint64, s driver.Stream,
	fused []fusion.UploadCopy, parts, w int, fill func(lo, hi int)) (uint64, string, error) {
	start := func(i int) int { return lay.Offs[i] }
	if parts == 1 {
		copyjob.ForParts(len(fused), w, t.Linger, start, lay.DataEnd, fill)
		Phase("pack")
		if err := drv.MemcpyHtoDAsync(dev, stage, s); err != nil {
			return 0, "MemcpyHtoDAsync", err
		}
		if err := t.Step(drv, s, "dma"); err != nil {
			return 0, "StreamSynchronize", err
		}
		return 1, "", nil
	}
	dmas := uint64(0)
	err := StreamParts(len(fused), parts, w, t.Linger, start, lay.DataEnd, fill,
		func(k, lo, hi int) error {
			if k == parts-1 {
				// Every piece is packed, so the table is complete: it goes
				// with the last part (which may be empty).
				start := lay.Table
				if lo < hi {
					start = lay.Offs[lo]
				}
				dmas++
				return drv.MemcpyHtoDAsync(dev+uint64(start), stage[start:], s)
			}
			if lo == hi {
				return nil
			}
			start, end := lay.Offs[lo], lay.Offs[hi-1]+len(fused[hi-1].Data)
			dmas++
			return drv.MemcpyHtoDAsync(dev+uint64(start), stage[start:end:end], s)
		})
	if err != nil {
		return 0, "MemcpyHtoDAsync", err
	}
	Phase("pack")
	if err := t.Step(drv, s, "dma"); err != nil {
		return 0, "StreamSynchronize", err
	}
	return dmas, "", nil
}

// PackFill returns the fill of a packed upload (QueuePacked's fill) of the
// fused copies into stage, laid out as lay: fill(lo, hi) copies pieces
// [lo, hi) into place, with non-temporal stores (internal/ntcopy, so the
// DMA that follows reads them from memory rather than from other cores'
// caches) unless t.PlainPack, writes their table entries too when entries
// is set, and fences its stores.
func PackFill(t *Tuning, lay *Layout, stage []byte, fused []fusion.UploadCopy, entries bool) func(lo, hi int) {
	return func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if t.PlainPack {
				copy(stage[lay.Offs[i]:], fused[i].Data)
			} else {
				ntcopy.Copy(stage[lay.Offs[i]:], fused[i].Data)
			}
			if entries {
				lay.PutEntries(stage, i, fused[i].Dst, len(fused[i].Data))
			}
		}
		ntcopy.Fence()
	}
}

// StageUploads copies the fused uploads' bytes into stage, back to back,
// as t says (StageIn), on up to w goroutines, and fences the non-temporal
// stores before it returns.
func StageUploads(t *Tuning, stage []byte, fused []fusion.UploadCopy, w int) {
	if len(fused) == 1 {
		copyjob.ParallelCopy(stage, fused[0].Data, w, t.Linger, t.StageInFenced)
		return
	}
	if w <= 1 {
		off := 0
		for _, c := range fused {
			t.StageIn(stage[off:], c.Data)
			off += len(c.Data)
		}
		ntcopy.Fence()
		return
	}
	offs := make([]int, len(fused)+1)
	for i, c := range fused {
		offs[i+1] = offs[i] + len(c.Data)
	}
	copyjob.ForParts(len(fused), w, t.Linger, func(i int) int { return offs[i] }, offs[len(fused)], func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t.StageIn(stage[offs[i]:], fused[i].Data)
		}
		ntcopy.Fence()
	})
}
