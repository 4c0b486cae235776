package cudaapi

import (
	"fmt"
	"math"
	"unsafe"
)

// MaxKernelParams bounds NewKernelParams; CUDA kernels take at most a few
// kilobytes of parameters, far fewer than this many 8-byte values.
const MaxKernelParams = 1024

// kernelSlot is the bytes reserved per parameter value: every scalar and
// pointer a kernel takes fits, at its natural alignment.
const kernelSlot = 8

// KernelParams is the kernelParams argument of LaunchKernel kept in C memory:
// an array of n pointers, each to its own 8-byte value slot. Because neither
// the array nor the values live in Go memory, a launch passes no Go pointer to
// C. The driver copies the values when the launch is enqueued, so one
// KernelParams can be refilled and reused for the next launch. It is not safe
// for concurrent use.
type KernelParams struct {
	mem unsafe.Pointer // n pointers, then n value slots; nil after Free
	n   int
}

// NewKernelParams allocates storage for n kernel parameters, all zero. It
// returns ErrDriverNotFound when built without cgo.
func NewKernelParams(n int) (*KernelParams, error) {
	if n < 0 || n > MaxKernelParams {
		return nil, fmt.Errorf("cudaapi: NewKernelParams(%d): %w: want 0..%d parameters; Fix: pass the kernel's parameter count",
			n, CUDA_ERROR_INVALID_VALUE, MaxKernelParams)
	}
	k := &KernelParams{n: n}
	if n == 0 {
		return k, nil
	}
	size := n * (int(unsafe.Sizeof(uintptr(0))) + kernelSlot)
	k.mem = cMalloc(size)
	if k.mem == nil {
		if err := Loaded(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("cudaapi: NewKernelParams(%d): malloc of %d bytes failed: %w", n, size, CUDA_ERROR_OUT_OF_MEMORY)
	}
	clear(unsafe.Slice((*byte)(k.mem), size))
	ptrs := unsafe.Slice((*unsafe.Pointer)(k.mem), n)
	for i := range ptrs {
		ptrs[i] = k.slot(i)
	}
	return k, nil
}

// Len returns the number of parameters.
func (k *KernelParams) Len() int { return k.n }

// slot returns parameter i's value storage.
func (k *KernelParams) slot(i int) unsafe.Pointer {
	return unsafe.Add(k.mem, k.n*int(unsafe.Sizeof(uintptr(0)))+i*kernelSlot)
}

func (k *KernelParams) check(i int) error {
	if k.mem == nil && k.n > 0 {
		return fmt.Errorf("cudaapi: KernelParams used after Free: %w; Fix: allocate a new KernelParams", CUDA_ERROR_INVALID_VALUE)
	}
	if i < 0 || i >= k.n {
		return fmt.Errorf("cudaapi: KernelParams index %d out of range [0, %d): %w; Fix: set only the kernel's parameters",
			i, k.n, CUDA_ERROR_INVALID_VALUE)
	}
	return nil
}

// SetUint64 stores a 64-bit value as parameter i.
func (k *KernelParams) SetUint64(i int, v uint64) error {
	if err := k.check(i); err != nil {
		return err
	}
	*(*uint64)(k.slot(i)) = v
	return nil
}

// SetUint32 stores a 32-bit value as parameter i.
func (k *KernelParams) SetUint32(i int, v uint32) error {
	if err := k.check(i); err != nil {
		return err
	}
	*(*uint64)(k.slot(i)) = 0
	*(*uint32)(k.slot(i)) = v
	return nil
}

// SetFloat32 stores a float as parameter i.
func (k *KernelParams) SetFloat32(i int, v float32) error {
	return k.SetUint32(i, math.Float32bits(v))
}

// SetDevicePtr stores a device address as parameter i.
func (k *KernelParams) SetDevicePtr(i int, p DevicePtr) error {
	return k.SetUint64(i, uint64(p))
}

// Pointer returns the void** to pass as LaunchKernel's kernelParams; nil for
// a kernel without parameters.
func (k *KernelParams) Pointer() unsafe.Pointer { return k.mem }

// Free releases the C memory. Calling it again does nothing.
func (k *KernelParams) Free() {
	if k.mem != nil {
		cFree(k.mem)
		k.mem = nil
	}
}

// ModuleLoadImage loads a module from a PTX, cubin or fatbin image held in Go
// memory: it copies the image into C memory with the terminating NUL the
// driver expects of PTX text, calls ModuleLoadData, and frees the copy.
func ModuleLoadImage(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cudaapi: ModuleLoadImage: empty image: %w; Fix: pass PTX text or a cubin", CUDA_ERROR_INVALID_VALUE)
	}
	buf := cMalloc(len(image) + 1)
	if buf == nil {
		if err := Loaded(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("cudaapi: ModuleLoadImage: malloc of %d bytes failed: %w", len(image)+1, CUDA_ERROR_OUT_OF_MEMORY)
	}
	defer cFree(buf)
	dst := unsafe.Slice((*byte)(buf), len(image)+1)
	copy(dst, image)
	dst[len(image)] = 0
	return ModuleLoadData(buf)
}
