package fusion

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/accounting"
)

type cell struct{ handle, addr uint64 }

func applyUploads(copies []UploadCopy) map[cell]byte {
	mem := map[cell]byte{}
	for _, c := range copies {
		for j, b := range c.Data {
			mem[cell{c.Handle, c.Dst + uint64(j)}] = b
		}
	}
	return mem
}

func bs(s string) []byte { return []byte(s) }

// fuseUploadsCase is one FuseUploads input with the fused copies and byte
// count it must give.
type fuseUploadsCase struct {
	name      string
	in        []UploadCopy
	want      []UploadCopy
	wantBytes uint64
	aliasOf   []int // for each fused copy, the request whose Data it aliases, or -1
}

// fuseUploadsCases lists FuseUploads inputs: empties, single copies,
// merges of touching and overlapping ranges, and ranges that must stay apart.
func fuseUploadsCases() []fuseUploadsCase {
	return []fuseUploadsCase{
		{name: "nil", in: nil, want: nil},
		{name: "only empties", in: []UploadCopy{{1, 0, nil}, {2, 5, []byte{}}}, want: nil},
		{
			name: "single", in: []UploadCopy{{1, 10, bs("abc")}},
			want: []UploadCopy{{1, 10, bs("abc")}}, wantBytes: 3, aliasOf: []int{0},
		},
		{
			name: "one copy per buffer in handle order fuses to itself",
			in:   []UploadCopy{{1, 0, bs("ab")}, {2, 8, bs("c")}, {5, 0, bs("de")}},
			want: []UploadCopy{{1, 0, bs("ab")}, {2, 8, bs("c")}, {5, 0, bs("de")}}, wantBytes: 5, aliasOf: []int{0, 1, 2},
		},
		{
			name: "distinct handles then a repeated one merges",
			in:   []UploadCopy{{1, 0, bs("ab")}, {2, 0, bs("c")}, {2, 1, bs("d")}},
			want: []UploadCopy{{1, 0, bs("ab")}, {2, 0, bs("cd")}}, wantBytes: 4, aliasOf: []int{0, -1},
		},
		{
			name: "disjoint same handle stay apart, sorted by address",
			in:   []UploadCopy{{1, 10, bs("cd")}, {1, 0, bs("ab")}},
			want: []UploadCopy{{1, 0, bs("ab")}, {1, 10, bs("cd")}}, wantBytes: 4, aliasOf: []int{1, 0},
		},
		{
			name: "touching same handle merges",
			in:   []UploadCopy{{1, 2, bs("cd")}, {1, 0, bs("ab")}},
			want: []UploadCopy{{1, 0, bs("abcd")}}, wantBytes: 4, aliasOf: []int{-1},
		},
		{
			name: "overlap: later request wins",
			in:   []UploadCopy{{1, 0, bs("aaaa")}, {1, 2, bs("bbbb")}},
			want: []UploadCopy{{1, 0, bs("aabbbb")}}, wantBytes: 6, aliasOf: []int{-1},
		},
		{
			name: "overlap: later wins even at a lower address",
			in:   []UploadCopy{{1, 2, bs("bbbb")}, {1, 0, bs("aaaa")}},
			want: []UploadCopy{{1, 0, bs("aaaabb")}}, wantBytes: 6, aliasOf: []int{-1},
		},
		{
			name: "later full cover replaces without copying",
			in:   []UploadCopy{{1, 2, bs("xx")}, {1, 0, bs("abcdef")}},
			want: []UploadCopy{{1, 0, bs("abcdef")}}, wantBytes: 6, aliasOf: []int{1},
		},
		{
			name: "earlier cover is patched by a later inner copy",
			in:   []UploadCopy{{1, 0, bs("abcdef")}, {1, 2, bs("XX")}},
			want: []UploadCopy{{1, 0, bs("abXXef")}}, wantBytes: 6, aliasOf: []int{-1},
		},
		{
			name: "identical ranges: last wins, aliased",
			in:   []UploadCopy{{1, 0, bs("aaa")}, {1, 0, bs("bbb")}, {1, 0, bs("ccc")}},
			want: []UploadCopy{{1, 0, bs("ccc")}}, wantBytes: 3, aliasOf: []int{2},
		},
		{
			name: "distinct handles never merge even when touching",
			in:   []UploadCopy{{2, 0, bs("ab")}, {1, 2, bs("cd")}, {1, 0, bs("")}},
			want: []UploadCopy{{1, 2, bs("cd")}, {2, 0, bs("ab")}}, wantBytes: 4, aliasOf: []int{1, 0},
		},
		{
			name: "empties between merge candidates are dropped",
			in:   []UploadCopy{{1, 0, bs("ab")}, {1, 2, nil}, {1, 2, bs("cd")}},
			want: []UploadCopy{{1, 0, bs("abcd")}}, wantBytes: 4, aliasOf: []int{-1},
		},
		{
			name: "chain of touching copies becomes one",
			in:   []UploadCopy{{3, 4, bs("e")}, {3, 0, bs("ab")}, {3, 2, bs("cd")}, {3, 9, bs("z")}},
			want: []UploadCopy{{3, 0, bs("abcde")}, {3, 9, bs("z")}}, wantBytes: 6, aliasOf: []int{-1, 3},
		},
		{
			name: "range ending at the top of the address space",
			in:   []UploadCopy{{1, math.MaxUint64 - 2, bs("ab")}},
			want: []UploadCopy{{1, math.MaxUint64 - 2, bs("ab")}}, wantBytes: 2, aliasOf: []int{0},
		},
	}
}

// TestFuseUploads checks each case's fused copies and byte count, that the
// input is left alone, that the fused copies write the same memory, and which
// fused copies alias a request's Data and which own a new buffer.
func TestFuseUploads(t *testing.T) {
	tests := fuseUploadsCases()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cloneUploads(tt.in)
			got, n, err := FuseUploads(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.wantBytes, n)
			assert.Equal(t, before, tt.in, "the input is left as it was")
			assert.Equal(t, applyUploads(tt.in), applyUploads(got), "fused copies leave the same memory")
			for j, src := range tt.aliasOf {
				if src >= 0 {
					assert.Same(t, &tt.in[src].Data[0], &got[j].Data[0], "fused copy %d aliases request %d", j, src)
				} else {
					for _, c := range tt.in {
						if len(c.Data) > 0 {
							assert.NotSame(t, &c.Data[0], &got[j].Data[0], "merged copy %d has its own buffer", j)
						}
					}
				}
			}
		})
	}
}

func cloneUploads(in []UploadCopy) []UploadCopy {
	if in == nil {
		return nil
	}
	out := make([]UploadCopy, len(in))
	for i, c := range in {
		out[i] = UploadCopy{c.Handle, c.Dst, append([]byte(nil), c.Data...)}
		if c.Data != nil && len(c.Data) == 0 {
			out[i].Data = []byte{}
		}
	}
	return out
}

func TestFuseUploadsErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    []UploadCopy
		inMsg string
	}{
		{"dst wraps", []UploadCopy{{1, 0, bs("a")}, {7, math.MaxUint64 - 1, bs("abc")}}, "request 1: handle 7 dst 0xfffffffffffffffe + 3 bytes"},
		{"max address plus one byte", []UploadCopy{{1, math.MaxUint64, bs("a")}}, "request 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := FuseUploads(tt.in)
			require.ErrorIs(t, err, accounting.ErrOverflow)
			assert.Contains(t, err.Error(), tt.inMsg)
			assert.Contains(t, err.Error(), "Fix: ")
			assert.Nil(t, got)
			assert.Zero(t, n)
		})
	}
}

func TestFuseUploadsAllocations(t *testing.T) {
	sortedDisjoint := []UploadCopy{{1, 0, bs("ab")}, {1, 4, bs("cd")}, {2, 0, bs("ef")}}
	allocs := testing.AllocsPerRun(100, func() { _, _, _ = FuseUploads(sortedDisjoint) })
	assert.Equal(t, 1.0, allocs, "sorted input with nothing to merge allocates only the output")
	oneEach := []UploadCopy{{1, 0, bs("ab")}, {2, 4, bs("cd")}, {3, 0, bs("ef")}}
	allocs = testing.AllocsPerRun(100, func() { _, _, _ = FuseUploads(oneEach) })
	assert.Equal(t, 1.0, allocs, "one copy per buffer allocates only the output")

	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop scratch at random")
	}
	unsortedMerging := []UploadCopy{{2, 0, bs("ef")}, {1, 2, bs("cd")}, {1, 0, bs("ab")}, {1, 9, bs("x")}, {1, 8, bs("y")}}
	allocs = testing.AllocsPerRun(100, func() { _, _, _ = FuseUploads(unsortedMerging) })
	assert.Equal(t, 2.0, allocs, "output and one shared merge buffer; the sort scratch is recycled")
}

func TestFuseReadbacks(t *testing.T) {
	none := ReadbackView{Slot: -1}
	tests := []struct {
		name string
		in   []ReadbackCopy
		want FusedReadbacks
	}{
		{name: "nil", in: nil, want: FusedReadbacks{}},
		{
			name: "only zero-length",
			in:   []ReadbackCopy{{1, 0, 0}, {2, 9, 0}},
			want: FusedReadbacks{Views: []ReadbackView{none, none}},
		},
		{
			name: "single",
			in:   []ReadbackCopy{{1, 8, 4}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 8, 4}}, Views: []ReadbackView{{0, 0, 4}}, Bytes: 4},
		},
		{
			name: "one copy per buffer in handle order",
			in:   []ReadbackCopy{{1, 0, 4}, {3, 8, 2}, {7, 0, 1}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}, {3, 8, 2}, {7, 0, 1}}, Views: []ReadbackView{{0, 0, 4}, {1, 0, 2}, {2, 0, 1}}, Bytes: 7},
		},
		{
			name: "distinct handles then a repeated one merges",
			in:   []ReadbackCopy{{1, 0, 4}, {2, 0, 2}, {2, 2, 2}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}, {2, 0, 4}}, Views: []ReadbackView{{0, 0, 4}, {1, 0, 2}, {1, 2, 2}}, Bytes: 8},
		},
		{
			name: "overlapping same handle merge, views in request order",
			in:   []ReadbackCopy{{1, 4, 4}, {1, 0, 6}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 8}}, Views: []ReadbackView{{0, 4, 4}, {0, 0, 6}}, Bytes: 8},
		},
		{
			name: "touching same handle merge",
			in:   []ReadbackCopy{{1, 0, 4}, {1, 4, 4}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 8}}, Views: []ReadbackView{{0, 0, 4}, {0, 4, 4}}, Bytes: 8},
		},
		{
			name: "gap keeps copies apart",
			in:   []ReadbackCopy{{1, 5, 4}, {1, 0, 4}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}, {1, 5, 4}}, Views: []ReadbackView{{1, 0, 4}, {0, 0, 4}}, Bytes: 8},
		},
		{
			name: "distinct handles never merge",
			in:   []ReadbackCopy{{2, 4, 4}, {1, 0, 4}, {1, 2, 0}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}, {2, 4, 4}}, Views: []ReadbackView{{1, 0, 4}, {0, 0, 4}, none}, Bytes: 8},
		},
		{
			name: "duplicates read once",
			in:   []ReadbackCopy{{1, 0, 4}, {1, 0, 4}, {1, 1, 2}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}}, Views: []ReadbackView{{0, 0, 4}, {0, 0, 4}, {0, 1, 2}}, Bytes: 4},
		},
		{
			name: "sorted input with zero-length in the middle",
			in:   []ReadbackCopy{{1, 0, 2}, {1, 100, 0}, {1, 2, 2}, {2, 0, 1}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, 0, 4}, {2, 0, 1}}, Views: []ReadbackView{{0, 0, 2}, none, {0, 2, 2}, {1, 0, 1}}, Bytes: 5},
		},
		{
			name: "range ending at the top of the address space",
			in:   []ReadbackCopy{{1, math.MaxUint64 - 3, 3}},
			want: FusedReadbacks{Copies: []ReadbackCopy{{1, math.MaxUint64 - 3, 3}}, Views: []ReadbackView{{0, 0, 3}}, Bytes: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]ReadbackCopy(nil), tt.in...)
			got, err := FuseReadbacks(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, before, tt.in, "the input is left as it was")
		})
	}
}

func TestFuseReadbacksErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      []ReadbackCopy
		wantErr error
		inMsg   string
	}{
		{"negative length", []ReadbackCopy{{1, 0, 4}, {3, 16, -2}}, accounting.ErrNegative, "request 1: handle 3 src 0x10 has length -2"},
		{"src wraps", []ReadbackCopy{{5, math.MaxUint64 - 1, 2}}, accounting.ErrOverflow, "request 0: handle 5 src 0xfffffffffffffffe + 2 bytes"},
		{"fused copy longer than an int", []ReadbackCopy{{1, 0, math.MaxInt}, {1, math.MaxInt, 1}}, accounting.ErrOverflow, "handle 1: fused range [0x0, 0x8000000000000000)"},
		{"total bytes wrap", []ReadbackCopy{{1, 0, math.MaxInt}, {2, 0, math.MaxInt}, {3, 0, math.MaxInt}}, accounting.ErrOverflow, "accounting: FuseReadbacks: overflow: fused copies total 18446744073709551614 + 9223372036854775807 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FuseReadbacks(tt.in)
			require.ErrorIs(t, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.inMsg)
			assert.Equal(t, FusedReadbacks{}, got)
		})
	}
}

func TestFuseReadbacksAllocations(t *testing.T) {
	sorted := []ReadbackCopy{{1, 0, 4}, {1, 2, 4}, {1, 0, 0}, {2, 0, 8}}
	allocs := testing.AllocsPerRun(100, func() { _, _ = FuseReadbacks(sorted) })
	assert.Equal(t, 2.0, allocs, "sorted input: views and copies only, no sort scratch")
	oneEach := []ReadbackCopy{{1, 0, 4}, {2, 2, 4}, {3, 0, 8}}
	allocs = testing.AllocsPerRun(100, func() { _, _ = FuseReadbacks(oneEach) })
	assert.Equal(t, 2.0, allocs, "one copy per buffer: views and copies only")

	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop scratch at random")
	}
	unsorted := []ReadbackCopy{{2, 0, 8}, {1, 2, 4}, {1, 0, 4}}
	allocs = testing.AllocsPerRun(100, func() { _, _ = FuseReadbacks(unsorted) })
	assert.Equal(t, 2.0, allocs, "unsorted input: still views and copies only, the scratch is recycled")
}
