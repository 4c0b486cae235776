// Package kernels holds vyrecuda's built-in CUDA kernels: their CUDA C
// sources (*.cu), the PTX that nvcc generated from them (embedded below), and
// pure-Go reference implementations over little-endian byte slices that
// compute exactly what each kernel computes. Package core wraps each pair into
// a core.Program whose Go half runs on the simulated device.
//
// The PTX is regenerated on a machine with nvcc (CUDA 13 dropped compute_70,
// so compute_75 is the oldest target it accepts):
//
//	nvcc -ptx -arch=compute_75 core/kernels/NAME.cu -o core/kernels/NAME.ptx
//
// Fill, copy, vadd and scale also come as NAME_sm90.ptx, for devices of
// compute capability 9.0 and newer: the same kernel built for compute_90,
// where it executes griddepcontrol.launch_dependents and griddepcontrol.wait
// (cudaTriggerProgrammaticLaunchCompletion and cudaGridDependencySynchronize
// in the source) before its first global memory access. Launched with
// programmatic stream serialization, such a kernel may be scheduled while the
// kernel ahead of it on the stream is still running, and waits for that
// kernel's results on the device; launched normally, the two instructions do
// nothing. Regenerate them with
//
//	nvcc -ptx -arch=compute_90 core/kernels/NAME.cu -o core/kernels/NAME_sm90.ptx
//
// Every kernel uses grid-stride loops, so any grid size computes the whole
// result; the launch geometry only changes speed.
package kernels

import (
	_ "embed"
	"encoding/binary"
	"math"
)

// PTX images, one module per source file.
var (
	//go:embed fill.ptx
	FillPTX []byte
	//go:embed copy.ptx
	CopyPTX []byte
	//go:embed vadd.ptx
	VAddPTX []byte
	//go:embed scale.ptx
	ScalePTX []byte
	//go:embed scatter.ptx
	ScatterPTX []byte
)

// PTX images for compute capability 9.0 and newer, whose kernels wait on
// their grid dependencies (programmatic dependent launch); same entry points
// and parameters as the images above.
var (
	//go:embed fill_sm90.ptx
	FillPTXSM90 []byte
	//go:embed copy_sm90.ptx
	CopyPTXSM90 []byte
	//go:embed vadd_sm90.ptx
	VAddPTXSM90 []byte
	//go:embed scale_sm90.ptx
	ScalePTXSM90 []byte
)

// Entry point names inside the PTX images.
const (
	FillEntry    = "vyre_fill_u32"  // (dst, n, value) in FillPTX
	CopyEntry    = "vyre_copy_u32"  // (src, dst, n) in CopyPTX
	VAddEntry    = "vyre_vadd_u32"  // (a, b, out, n) in VAddPTX
	ScaleEntry   = "vyre_scale_f32" // (x, out, n, factor_bits) in ScalePTX
	ScatterEntry = "vyre_scatter"   // (packed, table, count) in ScatterPTX
	GatherEntry  = "vyre_gather"    // (packed, table, count) in ScatterPTX
)

// TableEntryBytes is the size of one scatter/gather table entry: three
// little-endian uint64 words {device address, packed offset, byte length}.
const TableEntryBytes = 24

// Fill sets the first n 32-bit words of dst to value.
func Fill(dst []byte, n int, value uint32) {
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(dst[4*i:], value)
	}
}

// Copy copies the first n 32-bit words of src to dst.
func Copy(src, dst []byte, n int) {
	copy(dst[:4*n], src[:4*n])
}

// VAdd sets out[i] = a[i] + b[i] (wrapping) for the first n uint32 words.
func VAdd(a, b, out []byte, n int) {
	for i := 0; i < n; i++ {
		x := binary.LittleEndian.Uint32(a[4*i:])
		y := binary.LittleEndian.Uint32(b[4*i:])
		binary.LittleEndian.PutUint32(out[4*i:], x+y)
	}
}

// Scale sets out[i] = x[i] * factor for the first n float32 words, with one
// IEEE-754 round-to-nearest multiply as the kernel's __fmul_rn does.
func Scale(x, out []byte, n int, factor float32) {
	for i := 0; i < n; i++ {
		v := math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v*factor))
	}
}
