//go:build gpu

package core_test

import "testing"

// TestGPUScatterGatherMisaligned runs the scatter and gather kernels (PTX)
// on segments at every start offset modulo 16 and lengths around the
// 16-byte word, and compares every byte with a CPU copy: the kernels' choice
// between 16-byte words and bytes must not depend on alignment the segment
// does not have. Run on a GPU machine:
//
//	.gpu/core.test -test.run 'GPUScatterGatherMisaligned' -test.v
func TestGPUScatterGatherMisaligned(t *testing.T) {
	b := openXferGPU(t, packFromTwo)
	for seed := int64(1); seed <= 3; seed++ {
		checkMisalignedPacked(t, b, seed)
	}
}
