package accounting

import (
	"fmt"
	"math/bits"
)

// maxBucketSlots bounds how many free allocations one pool bucket keeps.
const maxBucketSlots = 1024

// BucketSize rounds a request of n bytes up to its pool bucket: the next
// power of two, and at least 1 (a zero-byte request still gets a 1-byte
// bucket). A negative n is an ErrNegative error; a request whose bucket does
// not fit in an int is an ErrOverflow error.
func BucketSize(n int) (int, error) {
	if n < 0 {
		return 0, newError("BucketSize", ErrNegative, fmt.Sprintf("request of %d bytes", n), fixNegative)
	}
	if n <= 1 {
		return 1, nil
	}
	shift := bits.Len(uint(n - 1))
	if shift >= bits.UintSize-1 {
		return 0, newError("BucketSize", ErrOverflow,
			fmt.Sprintf("request of %d bytes cannot be rounded up to a power of two that fits in an int", n),
			"cap buffer sizes before allocating")
	}
	return 1 << shift, nil
}

// BucketSlots returns how many free allocations a pool keeps for one bucket
// size: maxCached/bucket, clamped to 1..1024. A non-positive bucket counts as
// 1 and a negative maxCached as 0, so the answer is always in 1..1024.
func BucketSlots(bucket, maxCached int) int {
	bucket = max(bucket, 1)
	maxCached = max(maxCached, 0)
	return min(max(maxCached/bucket, 1), maxBucketSlots)
}
