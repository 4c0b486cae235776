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

// bytesOf views s's elements as bytes, sharing its storage.
func bytesOf[T Numeric](s []T) []byte {
	if cap(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), cap(s)*sizeOf[T]())[:len(s)*sizeOf[T]()]
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
	data := bytesOf(src)
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
	data := bytesOf(src)
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
	got, err := b.download(op, buf.All(), bytesOf(out[:0]))
	if err != nil {
		return dst, err
	}
	if len(got) != buf.Len || (n > 0 && unsafe.SliceData(got) != (*byte)(unsafe.Pointer(unsafe.SliceData(out[:n])))) {
		return dst, newError(op, KindInvalidArgument, "the download did not land in the element storage",
			"report this as a bug in vyrecuda")
	}
	return out[:n], nil
}
