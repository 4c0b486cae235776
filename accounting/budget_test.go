package accounting

import (
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResidentTotalBudget(t *testing.T) {
	exact := func(total uint64) uint64 {
		v := new(big.Int).Mul(new(big.Int).SetUint64(total), big.NewInt(9))
		return v.Div(v, big.NewInt(10)).Uint64()
	}
	for _, total := range []uint64{0, 1, 9, 10, 11, 19, 10_000, 80 << 30, math.MaxUint64 / 9, math.MaxUint64 - 1, math.MaxUint64} {
		assert.Equal(t, exact(total), ResidentTotalBudget(total), "total %d", total)
	}
	assert.Equal(t, uint64(9_000), ResidentTotalBudget(10_000))
}

func TestResidentLiveBudget(t *testing.T) {
	tests := []struct {
		name                      string
		total, liveFree, resident uint64
		want                      uint64
	}{
		{"capped by live free memory", 10_000, 1_000, 0, 900},
		{"keeps owned bytes, caps headroom by total", 10_000, 8_000, 2_000, 9_000},
		{"no live free memory allows no growth", 10_000, 0, 2_000, 2_000},
		{"resident at budget", 10_000, 10_000, 9_000, 9_000},
		{"resident above budget", 10_000, 10_000, 9_500, 9_500},
		{"live free limits", 10_000, 5_000, 1_000, 5_500},
		{"max total", math.MaxUint64, math.MaxUint64, 1, ResidentTotalBudget(math.MaxUint64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ResidentLiveBudget(tt.total, tt.liveFree, tt.resident))
		})
	}
}

func TestOptimizerPoolBudget(t *testing.T) {
	assert.Equal(t, uint64(0), OptimizerPoolBudget(31))
	assert.Equal(t, uint64(1), OptimizerPoolBudget(32))
	assert.Equal(t, uint64(80<<30)/32, OptimizerPoolBudget(80<<30))
	assert.Equal(t, uint64(math.MaxUint64)/32, OptimizerPoolBudget(math.MaxUint64))
}

func TestBucketSize(t *testing.T) {
	tests := []struct {
		n       int
		want    int
		wantErr error
	}{
		{0, 1, nil}, {1, 1, nil}, {2, 2, nil}, {3, 4, nil}, {4, 4, nil}, {5, 8, nil},
		{4095, 4096, nil}, {4096, 4096, nil}, {4097, 8192, nil},
		{1 << 62, 1 << 62, nil},
		{1<<62 + 1, 0, ErrOverflow},
		{math.MaxInt, 0, ErrOverflow},
		{-1, 0, ErrNegative},
		{math.MinInt, 0, ErrNegative},
	}
	for _, tt := range tests {
		got, err := BucketSize(tt.n)
		if tt.wantErr != nil {
			require.ErrorIs(t, err, tt.wantErr, "n=%d", tt.n)
			continue
		}
		require.NoError(t, err, "n=%d", tt.n)
		assert.Equal(t, tt.want, got, "n=%d", tt.n)
	}
}

func TestBucketSlots(t *testing.T) {
	tests := []struct{ bucket, maxCached, want int }{
		{4096, 64 << 10, 16},
		{4096, 1 << 30, 1024},
		{4096, 0, 1},
		{4096, 100, 1},
		{0, 10, 10},
		{-5, 10, 10},
		{1, math.MaxInt, 1024},
		{8, -1, 1},
		{math.MaxInt, math.MaxInt, 1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, BucketSlots(tt.bucket, tt.maxCached), "bucket %d maxCached %d", tt.bucket, tt.maxCached)
	}
}
