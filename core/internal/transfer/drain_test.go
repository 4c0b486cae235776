package transfer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/fusion"
)

// GrowSlots reuses the capacity it has, elements past len included, and
// otherwise starts a new slice with every element within the old capacity.
func TestGrowSlotsReusesCapacity(t *testing.T) {
	s := make([]int, 2, 4)
	s[0], s[1] = 1, 2
	s[:4][3] = 9
	same := GrowSlots(s, 4)
	assert.Equal(t, []int{1, 2, 0, 9}, same)
	assert.Same(t, &s[0], &same[0])
	grown := GrowSlots(s, 6)
	assert.Equal(t, []int{1, 2, 0, 9, 0, 0}, grown)
	assert.Empty(t, GrowSlots([]int(nil), 0))
}

// A slot drain gives request i slot i's storage when it is large enough
// (any slot within the capacity of the caller's slice), else new storage;
// a fresh drain always gives new storage.
func TestSlotDrainReusesLargeEnoughSlots(t *testing.T) {
	big, small := make([]byte, 3, 8), make([]byte, 1)
	dst := make([][]byte, 2, 3)
	dst[0], dst[1] = big, small
	dst[:3][2] = make([]byte, 0, 16)
	res := make([][]byte, 4)
	d := SlotDrain(dst, res)
	require.False(t, d.Fresh)
	got := d.Dest(0, 5)
	assert.Len(t, got, 5)
	assert.Same(t, &big[:1][0], &got[0], "slot 0 reused")
	assert.Len(t, d.Dest(1, 4), 4)
	assert.Same(t, &small[0], &d.Dest(1, 1)[0], "a slot is reused when it fits exactly")
	assert.Equal(t, 16, cap(d.Dest(2, 10)), "a slot past len within cap is reused")
	assert.Len(t, d.Dest(3, 2), 2, "past the capacity: new storage")
	assert.Len(t, d.Res, 4)

	f := FreshDrain(res)
	assert.True(t, f.Fresh)
	assert.Len(t, f.Dest(0, 7), 7)
}

// FuseReads passes the usual batch (whole distinct buffers in handle
// order) through as its own fusion, with no views, and fuses anything else.
func TestFuseReadsPassesDistinctReadsThrough(t *testing.T) {
	distinct := []fusion.ReadbackCopy{{Handle: 1, Src: 1 << 20, Len: 64}, {Handle: 2, Src: 2 << 20, Len: 32}}
	f, err := FuseReads(distinct)
	require.NoError(t, err)
	assert.Nil(t, f.Views)
	assert.Equal(t, uint64(96), f.Bytes)
	assert.Same(t, &distinct[0], &f.Copies[0], "no copy of the requests")

	overlapping := []fusion.ReadbackCopy{{Handle: 1, Src: 1 << 20, Len: 64}, {Handle: 1, Src: 1<<20 + 32, Len: 64}}
	f, err = FuseReads(overlapping)
	require.NoError(t, err)
	require.Len(t, f.Views, 2)
	assert.Equal(t, uint64(96), f.Bytes, "the overlap is read once")
}

// Put clears what pooled scratch references, so no caller memory stays
// reachable from the pool, and Get hands out room for the items asked.
func TestScratchPoolsClearWhatTheyKeep(t *testing.T) {
	var sp ScratchPool[*int]
	sc := sp.Get(3)
	require.Len(t, sc.Ents[:3], 3)
	require.GreaterOrEqual(t, cap(sc.Ups), 3)
	x := 5
	sc.Ents[0], sc.Ents[2] = &x, &x
	sc.Ups = append(sc.Ups, fusion.UploadCopy{Data: []byte{1}})
	assert.Len(t, sc.Reads(4), 4)
	ents, ups := sc.Ents, sc.Ups[:1]
	sp.Put(sc)
	assert.Nil(t, ents[0])
	assert.Nil(t, ents[2])
	assert.Nil(t, ups[0].Data)

	var pool SlicePool[[]byte]
	v := pool.Get(2)
	(*v)[0] = []byte{1}
	kept := *v
	pool.Put(v)
	assert.Nil(t, kept[0])
	assert.Len(t, *GetInts(7), 7)
	slots := GetSlots(3)
	assert.Equal(t, [][]byte{nil, nil, nil}, *slots)
	PutSlots(slots)
}
