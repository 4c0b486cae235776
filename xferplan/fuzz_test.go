package xferplan

import (
	"testing"
	"time"
)

// FuzzChoose plans arbitrary requests under arbitrary tunings and models:
// Choose never panics and every plan keeps checkPlan's promises and
// checkBounds' bounds.
func FuzzChoose(f *testing.F) {
	f.Add(uint8(0), 1, int64(1<<20), int64(0), false, true, 16, int64(0), int64(0), int64(0), int64(0), 0, 0, 0, uint8(0), 0.0, int64(0))
	f.Add(uint8(1), 1024, int64(4<<20), int64(4<<20+40960), false, false, 2, int64(8), int64(64), int64(16), int64(16), 3, 32, 4, uint8(0), 1.0, int64(1000))
	f.Add(uint8(0), 1, int64(1<<40), int64(1<<41), true, true, 64, int64(-1), int64(-5), int64(1<<62), int64(1), -3, -1, 0, uint8(15), -2.0, int64(-1))
	f.Fuzz(func(t *testing.T, dir uint8, copies int, bytes, packed int64, pinned, streamable bool, procs int,
		workerBytes, stageMin, minChunk, maxChunk int64, blocks, packMin, parts int, only uint8, copyScale float64, latency int64) {
		q := Request{Dir: Direction(dir % 2), Copies: copies, Bytes: bytes, PackedBytes: packed, Pinned: pinned, Streamable: streamable,
			Drainable: dir&2 != 0}
		tu := Tuning{MaxWorkers: procs % 64, WorkerBytes: workerBytes, StageMin: stageMin, MinChunk: minChunk, MaxChunk: maxChunk,
			Blocks: blocks, PackMinCopies: packMin, PackParts: parts % 1000, Only: KindSet(only)}
		m := Reference()
		if copyScale > 0 && copyScale < 1e6 {
			for i := range m.Copy {
				m.Copy[i].GBps *= copyScale
			}
		}
		m.H2D.Latency = m.H2D.Latency + durOf(latency)
		p := Choose(q, tu, &m, procs)
		if err := checkPlan(q, tu, procs, p); err != nil {
			t.Fatalf("%+v under %+v (procs %d): %+v: %v", q, tu, procs, p, err)
		}
		if err := checkBounds(q, tu, procs, p); err != nil {
			t.Fatalf("%+v under %+v (procs %d): %+v: %v", q, tu, procs, p, err)
		}
	})
}

func durOf(ns int64) time.Duration { return time.Duration(ns % 1e9) }
