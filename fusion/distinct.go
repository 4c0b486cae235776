package fusion

// DistinctUploads reports whether copies already is its own fusion: non-empty
// copies in strictly increasing handle order (one per buffer), no range
// overflowing, which FuseUploads would return unchanged (as a copy). It
// returns their bytes. Callers that own copies can then use it as the fused
// result and skip FuseUploads' allocation.
func DistinctUploads(copies []UploadCopy) (bytes uint64, ok bool) { return distinctUploads(copies) }
