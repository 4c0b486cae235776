package fusion

// DistinctUploads reports whether copies already is its own fusion: non-empty
// copies in strictly increasing handle order (one per buffer), no range
// overflowing, which FuseUploads would return unchanged (as a copy). It
// returns their bytes. Callers that own copies can then use it as the fused
// result and skip FuseUploads' allocation.
func DistinctUploads(copies []UploadCopy) (bytes uint64, ok bool) { return distinctUploads(copies) }

// DistinctReadbacks reports whether reqs already is its own fusion:
// non-empty requests in strictly increasing handle order (one per buffer),
// no range overflowing, for which FuseReadbacks would return reqs as its
// copies (as a copy) and view i as the whole of copy i. It returns their
// bytes. Callers can then read reqs as the copies, with request i in copy
// i, and skip FuseReadbacks' allocations.
func DistinctReadbacks(reqs []ReadbackCopy) (bytes uint64, ok bool) {
	return distinctReadbackBytes(reqs)
}
