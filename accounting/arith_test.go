package accounting

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAddSubUint64(t *testing.T) {
	const maxU = uint64(math.MaxUint64)
	tests := []struct {
		name    string
		fn      func(a, b uint64) (uint64, error)
		a, b    uint64
		want    uint64
		wantErr error
		inMsg   string
	}{
		{"add", AddUint64, 2, 3, 5, nil, ""},
		{"add to max", AddUint64, maxU - 1, 1, maxU, nil, ""},
		{"add wraps", AddUint64, maxU, 1, 0, ErrOverflow, "18446744073709551615 + 1"},
		{"add both large", AddUint64, maxU / 2, maxU/2 + 2, 0, ErrOverflow, ""},
		{"sub", SubUint64, 5, 3, 2, nil, ""},
		{"sub to zero", SubUint64, 7, 7, 0, nil, ""},
		{"sub below zero", SubUint64, 3, 5, 0, ErrUnderflow, "3 - 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fn(tt.a, tt.b)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.inMsg)
				assert.Contains(t, err.Error(), "Fix: ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAddSubLen(t *testing.T) {
	tests := []struct {
		name    string
		fn      func(a, b int) (int, error)
		a, b    int
		want    int
		wantErr error
	}{
		{"add", AddLen, 2, 3, 5, nil},
		{"add to max", AddLen, math.MaxInt - 4, 4, math.MaxInt, nil},
		{"add overflows", AddLen, math.MaxInt, 1, 0, ErrOverflow},
		{"add negative a", AddLen, -1, 5, 0, ErrNegative},
		{"add negative b", AddLen, 5, -1, 0, ErrNegative},
		{"add min int", AddLen, math.MinInt, math.MaxInt, 0, ErrNegative},
		{"sub", SubLen, 9, 4, 5, nil},
		{"sub to zero", SubLen, 4, 4, 0, nil},
		{"sub below zero", SubLen, 4, 9, 0, ErrUnderflow},
		{"sub negative", SubLen, -4, -9, 0, ErrNegative},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fn(tt.a, tt.b)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestLenUint64(t *testing.T) {
	got, err := LenUint64(math.MaxInt)
	require.NoError(t, err)
	assert.Equal(t, uint64(math.MaxInt), got)
	_, err = LenUint64(-3)
	require.ErrorIs(t, err, ErrNegative)
	assert.Contains(t, err.Error(), "-3")
}

func TestRangeEnd(t *testing.T) {
	tests := []struct {
		name                  string
		offset, length, limit int
		want                  int
		wantErr               error
		inMsg                 string
	}{
		{"inside", 2, 3, 10, 5, nil, ""},
		{"ends at limit", 7, 3, 10, 10, nil, ""},
		{"empty at limit", 10, 0, 10, 10, nil, ""},
		{"empty at zero", 0, 0, 0, 0, nil, ""},
		{"past limit", 8, 3, 10, 0, ErrOutOfRange, "[8, 11) ends past limit 10"},
		{"offset past limit", 11, 0, 10, 0, ErrOutOfRange, ""},
		{"negative offset", -1, 3, 10, 0, ErrNegative, "offset -1"},
		{"negative length", 1, -3, 10, 0, ErrNegative, "length -3"},
		{"negative limit", 0, 0, -1, 0, ErrNegative, "limit -1"},
		{"overflow", math.MaxInt, 1, math.MaxInt, 0, ErrOverflow, ""},
		{"overflow both large", math.MaxInt - 5, math.MaxInt - 5, math.MaxInt, 0, ErrOverflow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RangeEnd(tt.offset, tt.length, tt.limit)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.inMsg)
				assert.Contains(t, err.Error(), "accounting: RangeEnd: ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAddPtr(t *testing.T) {
	tests := []struct {
		name    string
		ptr     uint64
		off     int
		want    uint64
		wantErr error
	}{
		{"zero offset", 0x1000, 0, 0x1000, nil},
		{"offset", 0x1000, 0x20, 0x1020, nil},
		{"to max", math.MaxUint64 - 1, 1, math.MaxUint64, nil},
		{"wraps", math.MaxUint64 - 1, 2, 0, ErrOverflow},
		{"negative", 0x1000, -1, 0, ErrNegative},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AddPtr(tt.ptr, tt.off)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestErrorShape(t *testing.T) {
	_, err := AddLen(math.MaxInt, 1)
	var ae *Error
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, "AddLen", ae.Op)
	assert.Equal(t, ErrOverflow, ae.Err)
	assert.NotEmpty(t, ae.Fix)
	assert.False(t, errors.Is(err, ErrUnderflow))
	assert.Equal(t, "accounting: op: overflow", (&Error{Op: "op", Err: ErrOverflow}).Error())
}
