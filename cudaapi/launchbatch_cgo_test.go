//go:build cgo

package cudaapi

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// useAbsLaunchKernel serves cuLaunchKernel from libc's abs: its first
// argument, the function handle, comes back as the launch's result, so a
// handle of 0 queues and a small handle fails with that code.
func useAbsLaunchKernel(t *testing.T) {
	t.Helper()
	libc, err := dlopen("libc.so.6")
	require.NoError(t, err)
	useFake(t, aliasLibrary{lib: libc, alias: map[string]string{"cuLaunchKernel": "abs"}}, nil)
}

func TestLaunchBatchStopsAtFirstFailure(t *testing.T) {
	useAbsLaunchKernel(t)
	var b LaunchBatch
	defer b.Free()
	tests := []struct {
		name    string
		fns     []Function
		wantAt  int
		wantErr error
	}{
		{"empty", nil, 0, nil},
		{"all queue", []Function{0, 0, 0}, 3, nil},
		{"first fails", []Function{1, 0, 0}, 0, CUDA_ERROR_INVALID_VALUE},
		{"middle fails", []Function{0, 0, 2, 0, 1}, 2, CUDA_ERROR_OUT_OF_MEMORY},
		{"last fails", []Function{0, 0, 0, 1}, 3, CUDA_ERROR_INVALID_VALUE},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, b.Reset(len(tc.fns), 2*len(tc.fns)))
			for i, f := range tc.fns {
				slots, err := b.Add(f, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, Stream(0x10), 2)
				require.NoError(t, err)
				slots[0], slots[1] = uint64(i), uint64(i)<<32
			}
			at, err := b.Launch()
			assert.Equal(t, tc.wantAt, at)
			if tc.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tc.wantErr)
			var r Result
			require.ErrorAs(t, err, &r)
		})
	}
}

func TestLaunchBatchLayoutAndBounds(t *testing.T) {
	var b LaunchBatch
	defer b.Free()
	require.NoError(t, b.Reset(2, 3))
	s0, err := b.Add(7, [3]uint32{1, 2, 3}, [3]uint32{4, 5, 6}, 64, Stream(9), 1)
	require.NoError(t, err)
	s0[0] = 0xdead
	s1, err := b.Add(8, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, Stream(9), 2)
	require.NoError(t, err)
	s1[0], s1[1] = 0xbeef, uint64(uint32(5))
	assert.Equal(t, 2, b.Len())

	recs := unsafe.Slice((*launchRecord)(b.mem), 2)
	assert.Equal(t, launchRecord{f: 7, stream: 9, grid: [3]uint32{1, 2, 3}, block: [3]uint32{4, 5, 6}, sharedMem: 64, params: 1}, recs[0])
	assert.Equal(t, uint32(2), recs[1].params)
	vals := unsafe.Slice((*uint64)(b.values()), 3)
	assert.Equal(t, []uint64{0xdead, 0xbeef, 5}, vals, "values run in launch order")

	_, err = b.Add(9, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, Stream(9), 0)
	assert.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE, "a third launch exceeds Reset's room")
	assert.Equal(t, 2, b.Len(), "a refused Add adds nothing")

	// Smaller batches reuse the memory; a larger one grows it.
	mem := b.mem
	require.NoError(t, b.Reset(1, 1))
	assert.Equal(t, mem, b.mem)
	assert.Equal(t, 0, b.Len())
	_, err = b.Add(1, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, Stream(9), 2)
	assert.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE, "more values than Reset made room for")
	require.NoError(t, b.Reset(100, 300))
	assert.GreaterOrEqual(t, b.recCap, 100)
	assert.GreaterOrEqual(t, b.valCap, 300)

	for _, bad := range [][2]int{{-1, 0}, {1, -1}, {MaxBatchLaunches + 1, 0}, {1, MaxKernelParams + 1}} {
		assert.ErrorIs(t, b.Reset(bad[0], bad[1]), CUDA_ERROR_INVALID_VALUE, "Reset(%d, %d)", bad[0], bad[1])
		assert.Equal(t, 0, b.Len())
	}
	b.Free()
	b.Free()
	assert.Nil(t, b.mem)
	require.NoError(t, b.Reset(1, 0), "a freed batch can be reset again")
}

// useStrlenLaunchKernelEx serves cuLaunchKernel from libc's abs, as
// useAbsLaunchKernel does, and, when ex is set, cuLaunchKernelEx from
// strlen: its first argument is the launch configuration, whose first
// field is grid x, so a grid x of 0x0101 comes back as result 2 from the
// extended path only.
func useStrlenLaunchKernelEx(t *testing.T, ex bool) {
	t.Helper()
	libc, err := dlopen("libc.so.6")
	require.NoError(t, err)
	alias := map[string]string{"cuLaunchKernel": "abs"}
	if ex {
		alias["cuLaunchKernelEx"] = "strlen"
	}
	useFake(t, aliasLibrary{lib: libc, alias: alias}, nil)
}

func TestLaunchBatchProgrammaticPath(t *testing.T) {
	grid := [3]uint32{0x0101, 1, 1}
	block := [3]uint32{32, 1, 1}
	for _, tc := range []struct {
		name         string
		ex           bool
		programmatic []bool
		wantAt       int
		wantErr      error
	}{
		{"plain launches never take the extended path", true, []bool{false, false}, 2, nil},
		{"a programmatic launch takes it", true, []bool{false, true, false}, 1, CUDA_ERROR_OUT_OF_MEMORY},
		{"without cuLaunchKernelEx it is a plain launch", false, []bool{false, true, true}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useStrlenLaunchKernelEx(t, tc.ex)
			var b LaunchBatch
			defer b.Free()
			require.NoError(t, b.Reset(len(tc.programmatic), len(tc.programmatic)))
			want := 0
			for _, p := range tc.programmatic {
				add := b.Add
				if p {
					add = b.AddProgrammatic
					want++
				}
				slots, err := add(0, grid, block, 0, Stream(0x10), 1)
				require.NoError(t, err)
				slots[0] = 7
			}
			assert.Equal(t, want, b.Programmatic())
			at, err := b.Launch()
			assert.Equal(t, tc.wantAt, at)
			if tc.wantErr == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.wantErr)
			}
			require.NoError(t, b.Reset(1, 0))
			assert.Zero(t, b.Programmatic(), "Reset forgets the programmatic launches")
		})
	}
}
