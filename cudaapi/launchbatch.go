package cudaapi

import (
	"fmt"
	"unsafe"
)

// MaxBatchLaunches bounds one LaunchBatch, so its C memory stays a size a
// caller can reason about and indexes fit the C helper's 32-bit counters.
const MaxBatchLaunches = 1 << 20

// launchRecord is one launch as the C helper reads it; launchbatch_cgo.go
// checks at compile time that it matches the C struct's layout.
type launchRecord struct {
	f, stream uintptr
	grid      [3]uint32
	block     [3]uint32
	sharedMem uint32
	params    uint32 // parameter values this launch takes from the value area
	flags     uint32 // launchProgrammatic or 0
}

// launchProgrammatic marks a record launched with programmatic stream
// serialization (AddProgrammatic).
const launchProgrammatic = 1

// LaunchBatch is many kernel launches kept in C memory so that Launch queues
// them all with one crossing into C, where a loop calls cuLaunchKernel: one
// record per launch, then every launch's parameter values, 8 bytes each, in
// launch order. Neither lives in Go memory, so no Go pointer reaches C, and
// the driver copies the values when each launch is queued, so a LaunchBatch is
// refilled with Reset and reused. It is not safe for concurrent use.
type LaunchBatch struct {
	mem                 unsafe.Pointer // recCap records, then valCap values; nil when empty or freed
	recCap, valCap      int
	n, vals             int // records and values filled since Reset
	programmatic        int // records added by AddProgrammatic since Reset
	wantLaunches, wantV int // what Reset promised room for
}

// Reset empties b and makes room for launches launches taking values
// parameter values in all, reusing b's C memory when it is large enough. It
// returns ErrDriverNotFound when built without cgo. After a failure b is empty.
func (b *LaunchBatch) Reset(launches, values int) error {
	b.n, b.vals, b.wantLaunches, b.wantV, b.programmatic = 0, 0, 0, 0, 0
	if launches < 0 || launches > MaxBatchLaunches || values < 0 || values > launches*MaxKernelParams {
		return fmt.Errorf("cudaapi: LaunchBatch.Reset(%d, %d): %w: want 0..%d launches of at most %d parameters each; Fix: split the batch",
			launches, values, CUDA_ERROR_INVALID_VALUE, MaxBatchLaunches, MaxKernelParams)
	}
	if launches > b.recCap || values > b.valCap {
		recCap, valCap := max(launches, b.recCap), max(values, b.valCap)
		size := recCap*int(unsafe.Sizeof(launchRecord{})) + valCap*kernelSlot
		mem := cMalloc(size)
		if mem == nil {
			if err := Loaded(); err != nil {
				return err
			}
			return fmt.Errorf("cudaapi: LaunchBatch.Reset(%d, %d): malloc of %d bytes failed: %w", launches, values, size, CUDA_ERROR_OUT_OF_MEMORY)
		}
		b.Free()
		b.mem, b.recCap, b.valCap = mem, recCap, valCap
	}
	b.wantLaunches, b.wantV = launches, values
	return nil
}

// Add appends a launch of f on s and returns its params parameter slots, one
// 8-byte value each, for the caller to fill before Launch: a device pointer
// as its address, a 32-bit scalar as uint64(v) (CUDA hosts are little-endian,
// so the kernel reads v from the slot's first 4 bytes). The slots alias C
// memory and are valid until the next Reset or Free.
func (b *LaunchBatch) Add(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params int) ([]uint64, error) {
	return b.add(f, grid, block, sharedMem, s, params, 0)
}

// AddProgrammatic is Add for a launch that may start before the launch
// queued ahead of it on s has finished: Launch queues it through
// cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
// set (programmatic dependent launch), so the device may schedule it as soon
// as every block of that earlier kernel has executed
// griddepcontrol.launch_dependents (or exited). The kernel must execute
// griddepcontrol.wait (cudaGridDependencySynchronize) before it touches
// memory the earlier kernel writes; that wait returns once the earlier grid
// has completed and its writes are visible. Devices before compute
// capability 9.0 run it as an ordinary launch. When the driver does not
// export cuLaunchKernelEx, Launch queues it through cuLaunchKernel, an
// ordinary launch, which is equally correct.
func (b *LaunchBatch) AddProgrammatic(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params int) ([]uint64, error) {
	return b.add(f, grid, block, sharedMem, s, params, launchProgrammatic)
}

func (b *LaunchBatch) add(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params int, flags uint32) ([]uint64, error) {
	if b.n >= b.wantLaunches || params < 0 || params > MaxKernelParams || params > b.wantV-b.vals {
		return nil, fmt.Errorf("cudaapi: LaunchBatch.Add: launch %d with %d parameters does not fit the room for %d launches and %d values (%d used): %w; Fix: Reset with the batch's launch and parameter counts",
			b.n, params, b.wantLaunches, b.wantV, b.vals, CUDA_ERROR_INVALID_VALUE)
	}
	recs := unsafe.Slice((*launchRecord)(b.mem), b.recCap)
	recs[b.n] = launchRecord{f: uintptr(f), stream: uintptr(s), grid: grid, block: block, sharedMem: sharedMem, params: uint32(params), flags: flags}
	b.programmatic += int(flags & launchProgrammatic)
	var slots []uint64
	if params > 0 {
		slots = unsafe.Slice((*uint64)(b.values()), b.valCap)[b.vals : b.vals+params : b.vals+params]
	}
	b.n++
	b.vals += params
	return slots, nil
}

// values returns the start of the value area.
func (b *LaunchBatch) values() unsafe.Pointer {
	return unsafe.Add(b.mem, b.recCap*int(unsafe.Sizeof(launchRecord{})))
}

// Bytes returns the size of the C memory b holds.
func (b *LaunchBatch) Bytes() int {
	return b.recCap*int(unsafe.Sizeof(launchRecord{})) + b.valCap*kernelSlot
}

// Len returns the number of launches added since Reset.
func (b *LaunchBatch) Len() int { return b.n }

// Launch queues the added launches in order, each through cuLaunchKernel on
// its own stream (cuLaunchKernelEx for those added by AddProgrammatic, when
// the driver exports it), in one call into C, which stops at the first
// failure. It
// returns the index of the launch that failed, with its Result as the error,
// or Len() and nil when all were queued: on failure the launches before the
// index were queued and none after it was attempted. The calling thread must
// have the launches' context current. Built without cgo, it returns 0 and
// ErrDriverNotFound.
func (b *LaunchBatch) Launch() (int, error) {
	if b.n == 0 {
		return 0, nil
	}
	return launchBatch(b.mem, b.values(), b.n, b.programmatic > 0)
}

// Programmatic returns the number of launches added by AddProgrammatic
// since Reset.
func (b *LaunchBatch) Programmatic() int { return b.programmatic }

// Free releases the C memory; the LaunchBatch can be Reset again afterwards.
func (b *LaunchBatch) Free() {
	if b.mem != nil {
		cFree(b.mem)
	}
	*b = LaunchBatch{}
}
