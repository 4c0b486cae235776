package fusion

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSortKeysMatchesComparisonSort checks the radix path against a plain
// comparison sort on distributions that exercise one, several and no
// varying digits in each word, including the top bits.
func TestSortKeysMatchesComparisonSort(t *testing.T) {
	gens := map[string]func(r *rand.Rand) (uint64, uint64){
		"small":        func(r *rand.Rand) (uint64, uint64) { return r.Uint64N(4), r.Uint64N(64) },
		"one handle":   func(r *rand.Rand) (uint64, uint64) { return 7, r.Uint64N(1 << 20) },
		"same address": func(r *rand.Rand) (uint64, uint64) { return r.Uint64N(300), 0x7f0000001000 },
		"duplicates":   func(r *rand.Rand) (uint64, uint64) { return r.Uint64N(2), r.Uint64N(3) },
		"full range":   func(r *rand.Rand) (uint64, uint64) { return r.Uint64(), r.Uint64() },
		"top bits": func(r *rand.Rand) (uint64, uint64) {
			return math.MaxUint64 - r.Uint64N(3), r.Uint64N(2) << 63
		},
		"device pointers": func(r *rand.Rand) (uint64, uint64) {
			return r.Uint64N(1024) + 1, 0x7f0000000000 + r.Uint64N(1<<30)
		},
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, smallSort - 1, smallSort, 100, 1024, 5000} {
			t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(n), 99))
				keys := make([]key, n)
				for i := range keys {
					h, a := gen(r)
					keys[i] = key{h, a, i}
				}
				want := slices.Clone(keys)
				slices.SortFunc(want, compareKeys)
				sortKeys(keys, make([]key, n))
				assert.Equal(t, want, keys)
			})
		}
	}
}

func TestSortByIndex(t *testing.T) {
	for _, n := range []int{0, 1, 5, smallSort + 10} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		keys := make([]key, n)
		for i := range keys {
			keys[i] = key{index: i}
		}
		r.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		sortByIndex(keys)
		for i := range keys {
			assert.Equal(t, i, keys[i].index)
		}
	}
}

// TestSortedInputIsNeverSorted runs random batches, sorted and not, through
// both fusers with a hook on the sort: sorted batches must never reach it,
// unsorted ones (with at least two non-empty requests) must.
func TestSortedInputIsNeverSorted(t *testing.T) {
	sorts := 0
	sortHook = func() { sorts++ }
	t.Cleanup(func() { sortHook = nil })
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		n := r.IntN(120)
		ups := make([]UploadCopy, n)
		reqs := make([]ReadbackCopy, n)
		for i := range ups {
			h, a, l := r.Uint64N(3)+1, r.Uint64N(40), r.IntN(12)
			ups[i] = UploadCopy{Handle: h, Dst: a, Data: make([]byte, l)}
			reqs[i] = ReadbackCopy{Handle: h, Src: a, Len: l}
		}
		sorted := trial%2 == 0
		if sorted {
			slices.SortStableFunc(ups, func(a, b UploadCopy) int { return compareKeys(key{a.Handle, a.Dst, 0}, key{b.Handle, b.Dst, 0}) })
			slices.SortStableFunc(reqs, func(a, b ReadbackCopy) int { return compareKeys(key{a.Handle, a.Src, 0}, key{b.Handle, b.Src, 0}) })
		}
		wantSort := !sorted && !slices.IsSortedFunc(nonEmptyKeys(reqs), compareKeys)
		for _, run := range []func(){
			func() { _, _, _ = FuseUploads(ups) },
			func() { _, _ = FuseReadbacks(reqs) },
		} {
			sorts = 0
			run()
			if wantSort {
				assert.Equal(t, 1, sorts, "trial %d: unsorted input is sorted once", trial)
			} else {
				assert.Zero(t, sorts, "trial %d: sorted input must not be sorted", trial)
			}
		}
	}
}

// nonEmptyKeys returns the (handle, src) keys of the non-empty requests
// with a zero index, so IsSortedFunc compares addresses only.
func nonEmptyKeys(reqs []ReadbackCopy) []key {
	var out []key
	for _, r := range reqs {
		if r.Len > 0 {
			out = append(out, key{r.Handle, r.Src, 0})
		}
	}
	return out
}

// TestConcurrentFusionSharesScratchSafely runs unsorted batches from many
// goroutines at once: recycled scratch must never be shared between calls.
func TestConcurrentFusionSharesScratchSafely(t *testing.T) {
	reqs := make([]ReadbackCopy, 200)
	ups := make([]UploadCopy, 200)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range reqs {
		reqs[i] = ReadbackCopy{Handle: r.Uint64N(4) + 1, Src: r.Uint64N(300), Len: r.IntN(8) + 1}
		ups[i] = UploadCopy{Handle: reqs[i].Handle, Dst: reqs[i].Src, Data: []byte{byte(i), byte(i >> 8)}}
	}
	wantR, err := FuseReadbacks(reqs)
	assert.NoError(t, err)
	wantU, _, err := FuseUploads(ups)
	assert.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				gotR, _ := FuseReadbacks(reqs)
				gotU, _, _ := FuseUploads(ups)
				assert.Equal(t, wantR, gotR)
				assert.Equal(t, wantU, gotU)
			}
		}()
	}
	wg.Wait()
}
