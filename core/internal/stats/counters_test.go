package stats

import (
	"reflect"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSnapshotReadsEachCounterIntoItsField: every counter lands in its own
// Snapshot field (a distinct value per counter catches a swapped pair), and
// Reset zeroes them all.
func TestSnapshotReadsEachCounterIntoItsField(t *testing.T) {
	var c Counters
	all := c.all()
	require.Equal(t, reflect.TypeOf(Snapshot{}).NumField(), len(all), "a counter without a Snapshot field, or one missing from all")
	for i, v := range all {
		v.Add(uint64(i + 1))
	}
	assert.Equal(t, Snapshot{
		HostToDeviceBytes: 1, DeviceToHostBytes: 2, UploadOps: 3, ReadbackOps: 4, SyncPoints: 5,
		ResidentAllocationBytes: 6, DeviceCopies: 7, RequestedCopies: 8, MemsetOps: 9, KernelLaunches: 10,
		PackedLaunches: 11, Collectives: 12,
	}, c.Snapshot())
	c.Reset()
	assert.Equal(t, Snapshot{}, c.Snapshot())
}

// TestCountersAddConcurrently: adds from many goroutines are all counted.
func TestCountersAddConcurrently(t *testing.T) {
	var c Counters
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.H2DBytes.Add(3)
				c.SyncPoints.Add(1)
			}
		}()
	}
	wg.Wait()
	s := c.Snapshot()
	assert.Equal(t, uint64(24000), s.HostToDeviceBytes)
	assert.Equal(t, uint64(8000), s.SyncPoints)
}
