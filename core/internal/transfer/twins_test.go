package transfer

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// fakeMemory is simulated device memory: allocations by base address.
type fakeMemory map[uint64][]byte

func (m fakeMemory) Bytes(ptr uint64, n int) ([]byte, error) {
	for base, b := range m {
		if ptr >= base && ptr-base+uint64(n) <= uint64(len(b)) {
			return b[ptr-base : ptr-base+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("%d bytes at %#x are in no allocation", n, ptr)
}

// The scatter twin puts every piece of a packed block at its device
// address, and the gather twin brings them back into a block laid out the
// same way, pieces of every shape (empty, ragged, longer than one entry).
func TestScatterAndGatherTwinsMoveEveryPiece(t *testing.T) {
	const dev, packed = 1 << 40, 1 << 41
	lens := []int{16, 0, 3, packEntryBytes + 5, 4096, 2*packEntryBytes + 16}
	lay := NewLayout(len(lens), func(i int) int { return lens[i] })
	block := make([]byte, lay.Total)
	device := make([]byte, 1<<20)
	for i, n := range lens {
		for k := range n {
			block[lay.Offs[i]+k] = byte(i*17 + k + 1)
		}
		lay.PutEntries(block, i, dev+uint64(i<<16), n)
	}
	mem := fakeMemory{dev: device, packed: block}
	args := []driver.KernelArg{{Ptr: packed, IsPtr: true}, {Ptr: packed + uint64(lay.Table), IsPtr: true}, {U32: uint32(lay.Entries)}}
	require.NoError(t, ScatterTwin(mem, driver.LaunchConfig{}, args))
	for i, n := range lens {
		assert.Equal(t, block[lay.Offs[i]:lay.Offs[i]+n], device[i<<16:i<<16+n], "piece %d on the device", i)
	}
	back := make([]byte, lay.Total)
	copy(back[lay.Table:], block[lay.Table:])
	mem[packed] = back
	require.NoError(t, GatherTwin(mem, driver.LaunchConfig{}, args))
	assert.Equal(t, block[:lay.DataEnd], back[:lay.DataEnd], "gathered block")
}

// The twins refuse parameters that are not (pointer, pointer, count) and
// entries that leave the memory, naming the kernel.
func TestTwinsRefuseBadParameters(t *testing.T) {
	mem := fakeMemory{1 << 40: make([]byte, 4096)}
	for name, args := range map[string][]driver.KernelArg{
		"too few":       {{Ptr: 1 << 40, IsPtr: true}},
		"count pointer": {{Ptr: 1 << 40, IsPtr: true}, {Ptr: 1 << 40, IsPtr: true}, {Ptr: 1 << 40, IsPtr: true}},
		"table outside": {{Ptr: 1 << 40, IsPtr: true}, {Ptr: 1 << 50, IsPtr: true}, {U32: 1}},
	} {
		err := ScatterTwin(mem, driver.LaunchConfig{}, args)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "vyre_scatter", name)
	}
	// One entry that points outside the memory.
	lay := NewLayout(1, func(int) int { return 64 })
	block := make([]byte, lay.Total)
	lay.PutEntries(block, 0, 1<<50, 64)
	mem[1<<41] = block
	args := []driver.KernelArg{{Ptr: 1 << 41, IsPtr: true}, {Ptr: 1<<41 + uint64(lay.Table), IsPtr: true}, {U32: 1}}
	err := GatherTwin(mem, driver.LaunchConfig{}, args)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device side")
}
