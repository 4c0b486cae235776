package fusion

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
