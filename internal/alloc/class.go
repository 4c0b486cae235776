package alloc

import "math/bits"

// exactClasses is how many of the smallest request sizes (1..exactClasses
// bytes) are classes of their own.
const exactClasses = 16

// stepsPerOctave is how many classes each power-of-two range is cut into;
// the rounding waste is below 1/stepsPerOctave of the request.
const stepsPerOctave = 8

// MaxClassSize is the largest request that has a size class: 2^62 bytes.
// Config.MaxClassed is clamped to it.
const MaxClassSize = uint64(1) << 62

// numClasses covers every class up to MaxClassSize: the exact ones, then 8
// per power-of-two range (2^k, 2^(k+1)] for k = 4..61.
const numClasses = exactClasses + (62-4)*stepsPerOctave

// classOf returns the class index and class size of an n-byte request,
// 1 <= n <= MaxClassSize.
func classOf(n uint64) (idx int, size uint64) {
	if n <= exactClasses {
		return int(n) - 1, n
	}
	k := bits.Len64(n-1) - 1 // 2^k < n <= 2^(k+1), k >= 4
	shift := uint(k - 3)     // step is 2^(k-3)
	base := uint64(1) << k
	sub := (n - base + (uint64(1) << shift) - 1) >> shift // 1..8
	return exactClasses + (k-4)*stepsPerOctave + int(sub) - 1, base + sub<<shift
}

// classSize returns the size of class idx (0 <= idx < numClasses).
func classSize(idx int) uint64 {
	if idx < exactClasses {
		return uint64(idx) + 1
	}
	i := idx - exactClasses
	k := i/stepsPerOctave + 4
	sub := uint64(i%stepsPerOctave) + 1
	return uint64(1)<<k + sub<<uint(k-3)
}

// ClassSize returns the bytes a request of n bytes reserves when it is served
// from a size class: n rounded up to its class. It returns 0 for n == 0 and
// for n > MaxClassSize, which have no class.
func ClassSize(n uint64) uint64 {
	if n == 0 || n > MaxClassSize {
		return 0
	}
	_, size := classOf(n)
	return size
}
