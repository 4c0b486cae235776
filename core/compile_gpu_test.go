//go:build gpu

// Kernels compiled from CUDA C at run time through NVRTC, on a real GPU.
// libnvrtc is found by the loader (see package nvrtcapi); on the reference
// machine it is /usr/local/cuda/lib64/libnvrtc.so.13.

package core_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/diskcache"
	"github.com/vyre-go/vyrecuda/nvrtc"
)

// gpuCompiler returns a Compiler over the system's NVRTC with its own disk
// cache in dir (a fresh one per test, so no earlier run's cache answers).
func gpuCompiler(tb testing.TB, dir string) *nvrtc.Compiler {
	tb.Helper()
	c, err := diskcache.Open(dir, 64<<20)
	require.NoError(tb, err)
	return nvrtc.New(nvrtc.System(), c)
}

func openCompileGPU(tb testing.TB, c *nvrtc.Compiler) *core.Backend {
	tb.Helper()
	b, err := core.OpenCUDA(0, core.WithCompiler(c))
	require.NoError(tb, err)
	tb.Cleanup(func() { assert.NoError(tb, b.Close()) })
	return b
}

func TestGPUCompileSaxpy(t *testing.T) {
	b := openCompileGPU(t, gpuCompiler(t, t.TempDir()))
	p, err := b.Compile(core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams,
		Grid: core.GridRule{ElemSize: 4}, Host: saxpyTwin})
	require.NoError(t, err)
	c, _ := p.Compiled()
	t.Logf("saxpy: target %s cubin %v symbol %s NVRTC %s", c.Target, c.CUBIN, c.Symbol, c.NVRTCVersion)
	info := b.DeviceInfo()
	assert.Equal(t, "sm_"+itoa(info.CCMajor*10+info.CCMinor), c.Target, "NVRTC 13 compiles a cubin for the device itself")
	n := 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), float32(n-i)
	}
	xs, err := core.AllocSlice[float32](b, n)
	require.NoError(t, err)
	ys, err := core.AllocSlice[float32](b, n)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, xs, x))
	require.NoError(t, core.UploadSlice(b, ys, y))
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(ys), core.ArgBuffer(xs), core.ArgFloat32(0.5), core.ArgUint32(uint32(n))}}))
	got, err := core.DownloadSlice[float32](b, ys, nil)
	require.NoError(t, err)
	for i := range got {
		if want := 0.5*x[i] + y[i]; got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func itoa(v int) string {
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

const scaleTemplate = `
template <typename T>
__global__ void scale(T *x, T a, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= a;
}
`

func TestGPUCompileTemplateThroughNameExpression(t *testing.T) {
	b := openCompileGPU(t, gpuCompiler(t, t.TempDir()))
	pd, err := b.Compile(core.CompileSpec{Name: "scale_f64", Source: scaleTemplate, Entry: "scale<double>",
		Params: []core.ParamType{core.ParamBuffer, core.ParamFloat64, core.ParamInt32}, Grid: core.GridRule{Blocks: 64}})
	require.NoError(t, err)
	pi, err := b.Compile(core.CompileSpec{Name: "scale_i16", Source: scaleTemplate, Entry: "scale<short>",
		Params: []core.ParamType{core.ParamBuffer, core.ParamInt16, core.ParamInt32}, Grid: core.GridRule{Blocks: 64}})
	require.NoError(t, err)
	cd, _ := pd.Compiled()
	ci, _ := pi.Compiled()
	t.Logf("scale<double> -> %s, scale<short> -> %s", cd.Symbol, ci.Symbol)
	assert.NotEqual(t, cd.Symbol, ci.Symbol)

	d := []float64{1, -2.5, 1e300, 3}
	ds, err := core.AllocSlice[float64](b, len(d))
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, ds, d))
	s := []int16{1, -2, 300, 4}
	ss, err := core.AllocSlice[int16](b, len(s))
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, ss, s))
	_, err = b.Run(core.Batch{Steps: []core.Step{
		{Program: pd, Config: core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(ds), core.ArgFloat64(-0.25), core.ArgInt32(int32(len(d)))}}},
		{Program: pi, Config: core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(ss), core.ArgInt16(-3), core.ArgInt32(int32(len(s)))}}},
	}}, nil)
	require.NoError(t, err)
	gd, err := core.DownloadSlice[float64](b, ds, nil)
	require.NoError(t, err)
	assert.Equal(t, []float64{-0.25, 0.625, -0.25e300, -0.75}, gd)
	gs, err := core.DownloadSlice[int16](b, ss, nil)
	require.NoError(t, err)
	assert.Equal(t, []int16{-3, 6, -900, -12}, gs)
}

func TestGPUCompileFloat64AndInt64Scalars(t *testing.T) {
	b := openCompileGPU(t, gpuCompiler(t, t.TempDir()))
	const src = `
extern "C" __global__ void axpb(double *y, const long long *x, double a, long long bias, long long n) {
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * (double)(x[i] + bias);
}`
	p, err := b.Compile(core.CompileSpec{Source: src, Entry: "axpb",
		Params: []core.ParamType{core.ParamBuffer, core.ParamBuffer, core.ParamFloat64, core.ParamInt64, core.ParamInt64},
		Grid:   core.GridRule{ElemSize: 8, FromBuffer: 0}})
	require.NoError(t, err)
	x := []int64{0, 1, -1, 1 << 33}
	xs, err := core.AllocSlice[int64](b, len(x))
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, xs, x))
	ys, err := core.AllocSlice[float64](b, len(x))
	require.NoError(t, err)
	const bias = int64(1) << 40 // needs all 64 bits of the parameter
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(ys), core.ArgBuffer(xs), core.ArgFloat64(math.Pi), core.ArgInt64(bias), core.ArgInt64(int64(len(x)))}}))
	got, err := core.DownloadSlice[float64](b, ys, nil)
	require.NoError(t, err)
	for i, v := range x {
		assert.Equal(t, math.Pi*float64(v+bias), got[i], "element %d", i)
	}
}

func TestGPUCompileBufferOffsetAndNarrowScalars(t *testing.T) {
	c := gpuCompiler(t, t.TempDir())
	b := openCompileGPU(t, c)
	const src = `
#include "fill.h"
__global__ void fill(unsigned char *p, unsigned char v, unsigned short n, signed char step) {
	for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = (unsigned char)(v + step * FILL_SCALE);
}`
	p, err := b.Compile(core.CompileSpec{Source: src, Entry: "fill",
		Options: core.CompileOptions{Headers: map[string]string{"fill.h": "#define FILL_SCALE (SCALE_BASE * 2)\n"},
			Defines: map[string]string{"SCALE_BASE": "3"}, FastMath: true, Std: "c++17"},
		Params: []core.ParamType{core.ParamBuffer, core.ParamUint8, core.ParamUint16, core.ParamInt8},
		Grid:   core.GridRule{Blocks: 1}})
	require.NoError(t, err)
	buf, err := b.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: buf, Data: make([]byte, 1000)}))
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBufferAt(buf, 100), core.ArgUint8(10), core.ArgUint16(300), core.ArgInt8(-1)}}))
	got, err := b.Download(buf.All(), nil)
	require.NoError(t, err)
	for i, v := range got {
		want := byte(0)
		if i >= 100 && i < 400 {
			want = 4 // 10 + (-1)*(3*2)
		}
		if v != want {
			t.Fatalf("byte %d = %d, want %d", i, v, want)
		}
	}
}

func TestGPUCompileErrorShowsTheCompilerLine(t *testing.T) {
	b := openCompileGPU(t, gpuCompiler(t, t.TempDir()))
	const src = "extern \"C\" __global__ void broken(float *p) {\n\tfloat x = 1;\n\tp[0] = x + undefined_name;\n}\n"
	_, err := b.Compile(core.CompileSpec{Name: "broken", Source: src, Entry: "broken",
		Params: []core.ParamType{core.ParamBuffer}, Grid: core.GridRule{Blocks: 1}})
	requireErrKind(t, err, core.ErrInvalidArgument, "broken.cu(3)", "undefined_name")
	t.Logf("compile error: %v", err)
}

func TestGPUCompileSecondBackendHitsTheDiskCache(t *testing.T) {
	dir := t.TempDir()
	first := gpuCompiler(t, dir)
	spec := core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams, Grid: core.GridRule{ElemSize: 4}}
	b1 := openCompileGPU(t, first)
	p1, err := b1.Compile(spec)
	require.NoError(t, err)
	c1, _ := p1.Compiled()
	assert.False(t, c1.Cached)
	assert.Equal(t, uint64(1), first.Calls())

	second := gpuCompiler(t, dir) // a new compiler over the same directory: what a second process has
	b2 := openCompileGPU(t, second)
	p2, err := b2.Compile(spec)
	require.NoError(t, err)
	c2, _ := p2.Compiled()
	assert.True(t, c2.Cached)
	assert.Zero(t, second.Calls(), "the second Backend did not call NVRTC")
	assert.Equal(t, uint64(1), second.CacheHits())

	// The cached image runs.
	xs, err := core.AllocSlice[float32](b2, 4)
	require.NoError(t, err)
	ys, err := core.AllocSlice[float32](b2, 4)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b2, xs, []float32{1, 2, 3, 4}))
	require.NoError(t, core.UploadSlice(b2, ys, []float32{1, 1, 1, 1}))
	require.NoError(t, b2.Dispatch(p2, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(ys), core.ArgBuffer(xs), core.ArgFloat32(3), core.ArgUint32(4)}}))
	got, err := core.DownloadSlice[float32](b2, ys, nil)
	require.NoError(t, err)
	assert.Equal(t, []float32{4, 7, 10, 13}, got)
}

// BenchmarkGPUCompileFirst measures a compilation NVRTC runs: saxpy with a
// unique define each iteration, so no cache answers, plus the module load.
func BenchmarkGPUCompileFirst(b *testing.B) {
	c := gpuCompiler(b, b.TempDir())
	be := openCompileGPU(b, c)
	b.ResetTimer()
	for i := range b.N {
		_, err := be.Compile(core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams, Grid: core.GridRule{ElemSize: 4},
			Options: core.CompileOptions{Defines: map[string]string{"ITER": itoa(i)}}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Calls())/float64(b.N), "nvrtc-calls/op")
}

// BenchmarkGPUCompileCached measures Backend.Compile answered by the disk
// cache with a compiler that has nothing in memory (a new process's first
// call): hash, read and verify the entry, load the module.
func BenchmarkGPUCompileCached(b *testing.B) {
	dir := b.TempDir()
	spec := core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams, Grid: core.GridRule{ElemSize: 4}}
	warm := openCompileGPU(b, gpuCompiler(b, dir))
	if _, err := warm.Compile(spec); err != nil {
		b.Fatal(err)
	}
	calls := uint64(0)
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		c := gpuCompiler(b, dir)
		be, err := core.OpenCUDA(0, core.WithCompiler(c))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		_, err = be.Compile(spec)
		b.StopTimer()
		calls += c.Calls()
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(calls)/float64(b.N), "nvrtc-calls/op")
}
