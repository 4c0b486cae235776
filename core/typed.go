package core

import (
	"fmt"
	"math"
	"unsafe"
)

// Numeric is a fixed-size numeric element type for the typed transfers
// (AllocSlice, UploadSlice, UploadSliceAt, DownloadSlice). int, uint and
// uintptr are left out: their size depends on the platform.
//
// Layout: a []T moves as its in-memory bytes, with no conversion and no copy
// beyond the one the transfer needs. CUDA hosts and devices are both
// little-endian, so a device kernel reading T (int32_t, float, double, ...)
// at index i of the buffer sees the Go slice's element i; complex64 and
// complex128 are the real part then the imaginary part (cuFloatComplex,
// cuDoubleComplex).
type Numeric interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// sizeOf returns T's size in bytes.
func sizeOf[T Numeric]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// AsBytes returns s's elements as bytes, in the layout Numeric describes:
// a view of the same storage, with no copy. Writing through either slice
// changes the other. Pass it where a call takes bytes (a Batch's
// UploadAt.Data, a read destination of DownloadMany or Run) to move typed
// data without encoding it. Its length is len(s)*size and its capacity
// cap(s)*size; nil or an empty capacity gives nil.
func AsBytes[T Numeric](s []T) []byte {
	if cap(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), cap(s)*sizeOf[T]())[:len(s)*sizeOf[T]()]
}

// KernelSlice returns the n elements of T at the device pointer arg in a Go
// twin (a HostKernel), as a slice over the simulated device's memory: reads
// and writes through it are the kernel's. It refuses, with an error the twin
// should return: a nil mem, an arg that is not a pointer, a negative n or
// one whose byte size overflows, memory that is not n*size bytes inside one
// live allocation (the driver's own error is the cause), and an address not
// aligned to T. n == 0 gives an empty slice. The slice is valid only until
// the twin returns.
func KernelSlice[T Numeric](mem KernelMemory, arg KernelArg, n int) ([]T, error) {
	const op = "KernelSlice"
	size := sizeOf[T]()
	var z T
	align := uint64(unsafe.Alignof(z))
	switch {
	case mem == nil:
		return nil, newError(op, KindInvalidArgument, "the KernelMemory is nil", "pass the KernelMemory the twin was called with")
	case !arg.IsPtr:
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("the argument is a scalar (bits %#x), not a device pointer", arg.Bits|uint64(arg.U32)),
			"pass a buffer argument; read scalars with the KernelArg accessors")
	case n < 0 || n > math.MaxInt/size:
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("%d elements of %d bytes", n, size),
			"ask for a non-negative element count whose byte size fits an int")
	case arg.Ptr%align != 0:
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("device address %#x is not a multiple of %d, the alignment of %d-byte elements", arg.Ptr, align, size),
			"pass a buffer (or offset) aligned to the element type")
	case n == 0:
		return []T{}, nil
	}
	raw, err := mem.Bytes(arg.Ptr, n*size)
	if err != nil {
		e := newError(op, KindInvalidArgument, fmt.Sprintf("%d elements of %d bytes at %#x", n, size, arg.Ptr),
			"ask for no more elements than the buffer holds from that address")
		e.Err = err
		return nil, e
	}
	if len(raw) != n*size || uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%uintptr(align) != 0 {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("the memory at %#x came back as %d bytes at host address %p, want %d bytes aligned to %d",
			arg.Ptr, len(raw), unsafe.SliceData(raw), n*size, align), "report this as a bug in the driver's KernelMemory")
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(raw))), n), nil
}

// AllocSlice allocates a resident buffer for n elements of T (n*size bytes).
// n must be positive and n*size must fit an int.
func AllocSlice[T Numeric](b *Backend, n int) (Buffer, error) {
	const op = "AllocSlice"
	size := sizeOf[T]()
	if n <= 0 || n > math.MaxInt/size {
		return Buffer{}, newError(op, KindInvalidArgument,
			fmt.Sprintf("%d elements of %d bytes", n, size), "ask for a positive element count whose byte size fits an int")
	}
	return b.allocateResident(op, n*size, false)
}

// UploadSlice copies src into the whole of buf, as its bytes (see Numeric
// for the layout); len(src)*size must equal buf.Len. src is read in place:
// no copy is made beyond the one into staging that every upload makes.
func UploadSlice[T Numeric](b *Backend, buf Buffer, src []T) error {
	const op = "UploadSlice"
	if err := elementsFit(op, buf, sizeOf[T](), 0, len(src), true); err != nil {
		return err
	}
	data := AsBytes(src)
	return b.uploadCall(op, 1, func(int) (Buffer, int, []byte) { return buf, 0, data }, true)
}

// UploadSliceAt copies src into buf starting at element index (byte offset
// index*size); the range must lie inside buf.
func UploadSliceAt[T Numeric](b *Backend, buf Buffer, index int, src []T) error {
	const op = "UploadSliceAt"
	size := sizeOf[T]()
	if index < 0 || index > math.MaxInt/size {
		return newError(op, KindInvalidArgument, fmt.Sprintf("element index %d of %d-byte elements", index, size),
			"pass an element index inside the buffer")
	}
	if err := elementsFit(op, buf, size, index, len(src), false); err != nil {
		return err
	}
	data := AsBytes(src)
	return b.uploadCall(op, 1, func(int) (Buffer, int, []byte) { return buf, index * size, data }, false)
}

// elementsFit checks, in elements of size bytes, that n elements at
// element index fit buf (whole: exactly fill it), so the typed uploads
// report counts the caller passed rather than bytes. Elements of one byte
// are bytes: the upload's own checks say the same, in the same words as
// the byte-slice calls.
func elementsFit(op string, buf Buffer, size, index, n int, whole bool) error {
	if size == 1 {
		return nil
	}
	if buf.Len < 0 || buf.Len%size != 0 {
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("handle %d holds %d bytes, not a whole number of %d-byte elements", buf.ID, buf.Len, size),
			"write it with Backend.Upload, or as an element type whose size divides its length")
	}
	have := buf.Len / size
	switch {
	case whole && n != have:
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("handle %d holds %d elements of %d bytes but got %d elements", buf.ID, have, size, n),
			"pass exactly the buffer's element count, or use UploadSliceAt to write part of it")
	case !whole && (index > have || n > have-index):
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("handle %d: %d elements at index %d do not fit its %d elements of %d bytes", buf.ID, n, index, have, size),
			"keep index+len(src) within the buffer's element count")
	}
	return nil
}

// DownloadSlice reads the whole of buf as elements of T into dst's storage,
// growing it only when its capacity is too small (append-style: use the
// returned slice), with no copy beyond the one out of staging. buf.Len must
// be a multiple of T's size. On failure dst is returned unchanged, its
// contents as Download leaves them.
func DownloadSlice[T Numeric](b *Backend, buf Buffer, dst []T) ([]T, error) {
	const op = "DownloadSlice"
	size := sizeOf[T]()
	if buf.Len < 0 || buf.Len%size != 0 {
		return dst, newError(op, KindInvalidArgument,
			fmt.Sprintf("handle %d holds %d bytes, not a whole number of %d-byte elements", buf.ID, buf.Len, size),
			"read it with Download, or as an element type whose size divides its length")
	}
	n := buf.Len / size
	out := dst[:0]
	if cap(dst) < n {
		out = make([]T, 0, n)
	}
	got, err := b.download(op, buf.All(), AsBytes(out[:0]))
	if err != nil {
		return dst, err
	}
	if len(got) != buf.Len || (n > 0 && unsafe.SliceData(got) != (*byte)(unsafe.Pointer(unsafe.SliceData(out[:n])))) {
		return dst, newError(op, KindInvalidArgument, "the download did not land in the element storage",
			"report this as a bug in vyrecuda")
	}
	return out[:n], nil
}
