package alloc

import (
	"errors"
	"fmt"
)

// errOOM is the fake device's out-of-memory error.
var errOOM = errors.New("fake: out of memory")

// errFail is the fake device's injected failure.
var errFail = errors.New("fake: injected failure")

// fakeDevice is a Device with a capacity, unique addresses, and faults on
// request. It refuses to free an address it does not hold.
type fakeDevice struct {
	capacity  uint64
	used      uint64
	next      uint64
	live      map[uint64]uint64
	allocs    int
	frees     int
	freeReads int
	failAlloc bool   // the next Alloc fails with errFail
	failFree  bool   // every Free fails with errFail
	failRead  bool   // the next FreeMemory fails
	hidden    uint64 // bytes the device uses without reporting them as used (another process)
}

func newFake(capacity uint64) *fakeDevice {
	return &fakeDevice{capacity: capacity, next: 1 << 20, live: map[uint64]uint64{}}
}

func (d *fakeDevice) Alloc(n uint64) (uint64, error) {
	d.allocs++
	if n == 0 {
		return 0, fmt.Errorf("fake: Alloc(0)")
	}
	if d.failAlloc {
		d.failAlloc = false
		return 0, errFail
	}
	if d.used+d.hidden+n > d.capacity {
		return 0, errOOM
	}
	p := d.next
	d.next += n + 256
	d.live[p] = n
	d.used += n
	return p, nil
}

func (d *fakeDevice) Free(p uint64) error {
	d.frees++
	n, ok := d.live[p]
	if !ok {
		return fmt.Errorf("fake: Free(%#x) of an address not live", p)
	}
	if d.failFree {
		return errFail
	}
	delete(d.live, p)
	d.used -= n
	return nil
}

func (d *fakeDevice) FreeMemory() (uint64, error) {
	d.freeReads++
	if d.failRead {
		d.failRead = false
		return 0, errFail
	}
	return d.capacity - d.used - min(d.hidden, d.capacity-d.used), nil
}

func isOOM(err error) bool { return errors.Is(err, errOOM) }
