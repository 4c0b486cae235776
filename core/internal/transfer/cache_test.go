package transfer

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
)

// The default evicts readback staging from 1 MiB to 64 MiB inclusive, and
// the two forced policies hold at every size, zero included.
func TestReadbackEvictPolicy(t *testing.T) {
	sizes := []uint64{0, 1, 64 << 10, 256 << 10, 1<<20 - 1, 1 << 20, 4 << 20, 64 << 20, 64<<20 + 1, 256 << 20}
	want := []bool{false, false, false, false, false, true, true, true, false, false}
	for i, n := range sizes {
		def := Tuning{}
		assert.Equal(t, want[i], def.EvictsReadback(n), "by size, %d bytes", n)
		never, always := Tuning{Evict: EvictNever}, Tuning{Evict: EvictAlways}
		assert.False(t, never.EvictsReadback(n), "never, %d bytes", n)
		assert.True(t, always.EvictsReadback(n), "always, %d bytes", n)
	}
}

// copyjob.ParallelCopy with each staging copy (into upload staging with
// non-temporal stores or cached ones, out of readback staging evicting it
// or not) copies exactly its slices, at odd lengths and offsets, and
// leaves the bytes around both untouched.
func TestParallelCopy(t *testing.T) {
	tunings := []Tuning{{EvictReads: true}, {PlainStage: true}}
	for _, tt := range tunings {
		for name, cp := range map[string]func(dst, src []byte){"in": tt.StageInFenced, "out": tt.StageOut} {
			for _, n := range []int{0, 1, 63, 64, 65, 1000, 1 << 16, 1<<16 + 333} {
				for _, w := range []int{1, 2, 3, 16} {
					src := make([]byte, n+10)
					for i := range src {
						src[i] = byte(i*7 + 1)
					}
					dst := bytes.Repeat([]byte{0xEE}, n+13)
					want := slices.Clone(src)
					copyjob.ParallelCopy(dst[5:5+n], src[3:3+n], w, copyjob.DefaultLinger, cp)
					assert.Equal(t, src[3:3+n], dst[5:5+n], "%s %+v n=%d w=%d", name, tt, n, w)
					assert.Equal(t, bytes.Repeat([]byte{0xEE}, 5), dst[:5], "%s n=%d w=%d: guard before", name, n, w)
					assert.Equal(t, bytes.Repeat([]byte{0xEE}, 8), dst[5+n:], "%s n=%d w=%d: guard after", name, n, w)
					assert.Equal(t, want, src, "%s n=%d w=%d: source changed", name, n, w)
				}
			}
		}
	}
}
