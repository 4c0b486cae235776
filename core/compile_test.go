package core_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/diskcache"
	"github.com/vyre-go/vyrecuda/nvrtc"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

const saxpySrc = `
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

// saxpyTwin computes on simulated memory what saxpy computes.
func saxpyTwin(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
	n := int(args[3].Uint32())
	y, err := mem.Bytes(args[0].Ptr, 4*n)
	if err != nil {
		return err
	}
	x, err := mem.Bytes(args[1].Ptr, 4*n)
	if err != nil {
		return err
	}
	a := args[2].Float32()
	for i := range n {
		yi := math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:]))
		xi := math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
		binary.LittleEndian.PutUint32(y[4*i:], math.Float32bits(a*xi+yi))
	}
	return nil
}

var saxpyParams = []core.ParamType{core.ParamBuffer, core.ParamBuffer, core.ParamFloat32, core.ParamUint32}

func TestCompileOnSimRunsTheTwin(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	p, err := b.Compile(core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams,
		Grid: core.GridRule{ElemSize: 4, FromBuffer: 0}, Host: saxpyTwin})
	require.NoError(t, err)
	c, ok := p.Compiled()
	require.True(t, ok)
	assert.Equal(t, "sim", c.Target)
	assert.Equal(t, "saxpy", p.Name())

	x := []float32{1, 2, 3, 4, 5}
	y := []float32{10, 20, 30, 40, 50}
	xb, err := core.AllocSlice[float32](b, len(x))
	require.NoError(t, err)
	yb, err := core.AllocSlice[float32](b, len(y))
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, xb, x))
	require.NoError(t, core.UploadSlice(b, yb, y))
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(yb), core.ArgBuffer(xb), core.ArgFloat32(2), core.ArgUint32(uint32(len(x)))}}))
	got, err := core.DownloadSlice[float32](b, yb, nil)
	require.NoError(t, err)
	assert.Equal(t, []float32{12, 24, 36, 48, 60}, got)

	_, ok = (&core.Program{}).Compiled()
	assert.False(t, ok)
}

func TestCompileOnSimNeedsATwin(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	_, err := b.Compile(core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams, Grid: core.GridRule{Blocks: 1}})
	requireErrKind(t, err, core.ErrUnsupported, "no Go twin", "CompileSpec.Host")
	_, err = b.Compile(core.CompileSpec{Source: " ", Entry: "saxpy"})
	requireErrKind(t, err, core.ErrInvalidArgument, "no source")
	_, err = b.Compile(core.CompileSpec{Source: saxpySrc})
	requireErrKind(t, err, core.ErrInvalidArgument, "no entry")
	_, err = b.Compile(core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: []core.ParamType{0}, Grid: core.GridRule{Blocks: 1}, Host: saxpyTwin})
	e := requireErrKind(t, err, core.ErrInvalidArgument)
	assert.Equal(t, "Compile", e.Op)
}

// gpuLike hides the simulated device's HostKernelBinder, so Backend.Compile
// takes the path of a real GPU (it calls the compiler and loads the image).
type gpuLike struct{ core.Driver }

// fakeNVRTC answers like NVRTC with a PTX-like image naming the lowered entry.
type fakeNVRTC struct {
	calls int
	fail  error
	reqs  []nvrtcapi.Request
}

func (f *fakeNVRTC) Version() (int, int, error)     { return 13, 0, nil }
func (f *fakeNVRTC) SupportedArchs() ([]int, error) { return []int{75, 80, 90}, nil }
func (f *fakeNVRTC) Compile(r nvrtcapi.Request) (nvrtcapi.Output, error) {
	f.calls++
	f.reqs = append(f.reqs, r)
	if f.fail != nil {
		return nvrtcapi.Output{}, f.fail
	}
	sym := "_Z" + strings.NewReplacer("<", "I", ">", "E").Replace(r.NameExpressions[0])
	return nvrtcapi.Output{Image: []byte(".entry " + sym + " {}\n"), Lowered: []string{sym}}, nil
}

func openGPULike(t *testing.T, c *nvrtc.Compiler) *core.Backend {
	t.Helper()
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(gpuLike{dev}, core.WithLogger(quietLogger), core.WithCompiler(c))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = b.Close()
		sim.RequireNoLeaks(t, dev)
	})
	return b
}

func TestCompileTakesTheCompilerPathAndTheDiskCache(t *testing.T) {
	dir := t.TempDir()
	cache := func() *diskcache.Cache {
		c, err := diskcache.Open(dir, 1<<20)
		require.NoError(t, err)
		return c
	}
	f1 := &fakeNVRTC{}
	b1 := openGPULike(t, nvrtc.New(f1, cache()))
	spec := core.CompileSpec{Name: "scale", Source: "template<typename T> __global__ void scale(T*, T) {}", Entry: "scale<double>",
		Options: core.CompileOptions{FastMath: true, Defines: map[string]string{"N": "1"}},
		Params:  []core.ParamType{core.ParamBuffer, core.ParamFloat64}, Grid: core.GridRule{Blocks: 1}}
	p, err := b1.Compile(spec)
	require.NoError(t, err)
	c, _ := p.Compiled()
	// The sim reports compute capability 9.0 (sm_90): a cubin.
	assert.Equal(t, core.Compiled{Target: "sm_90", CUBIN: true, Symbol: "_ZscaleIdoubleE", NVRTCVersion: "13.0"}, c)
	assert.Equal(t, "_ZscaleIdoubleE", p.Spec().Entry)
	require.Len(t, f1.reqs, 1)
	assert.Equal(t, "scale.cu", f1.reqs[0].Name)
	assert.Equal(t, []string{"-DN=1", "--use_fast_math", "-arch=sm_90"}, f1.reqs[0].Options)

	f2 := &fakeNVRTC{}
	b2 := openGPULike(t, nvrtc.New(f2, cache())) // a second Backend, as another process would open
	p2, err := b2.Compile(spec)
	require.NoError(t, err)
	c2, _ := p2.Compiled()
	assert.True(t, c2.Cached)
	assert.Zero(t, f2.calls, "the second Backend called no compiler")
	assert.Equal(t, p.Spec().Image, p2.Spec().Image)
}

func TestCompileErrorsCarryTheLog(t *testing.T) {
	log := "bad.cu(3): error: identifier \"oops\" is undefined\n1 error detected in the compilation of \"bad.cu\".\n"
	f := &fakeNVRTC{fail: &nvrtcapi.CompileError{Err: nvrtcapi.NVRTC_ERROR_COMPILATION, Log: log}}
	b := openGPULike(t, nvrtc.New(f, nil))
	_, err := b.Compile(core.CompileSpec{Name: "bad", Source: "x", Entry: "k", Grid: core.GridRule{Blocks: 1}})
	e := requireErrKind(t, err, core.ErrInvalidArgument, `bad.cu(3): error: identifier "oops" is undefined`, "compute capability 9.0")
	assert.Equal(t, 1, strings.Count(e.Error(), "Fix:"))
	assert.Equal(t, 1, strings.Count(e.Error(), "oops"), "the log appears once: %s", e.Error())
	assert.True(t, strings.HasSuffix(e.Error(), ": nvrtc: NVRTC_ERROR_COMPILATION (6). Fix: correct the source where the compiler's log points"), e.Error())
	var ce *nvrtcapi.CompileError
	assert.ErrorAs(t, err, &ce)

	f.fail = &nvrtcapi.LibraryNotFoundError{Tried: []string{"libnvrtc.so.13: not found"}, EnvName: nvrtcapi.LibraryEnv}
	b2 := openGPULike(t, nvrtc.New(f, nil))
	_, err = b2.Compile(core.CompileSpec{Source: "x", Entry: "k", Grid: core.GridRule{Blocks: 1}})
	e = requireErrKind(t, err, core.ErrUnsupported, "NVRTC is not available", "VYRECUDA_LIBNVRTC")
	assert.True(t, errors.Is(err, nvrtcapi.ErrLibraryNotFound))
	assert.Equal(t, 1, strings.Count(e.Error(), "Fix:"), e.Error())

	f.fail = fmt.Errorf("nvrtcAddNameExpression(%q): %w", "k<", nvrtcapi.NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID)
	b3 := openGPULike(t, nvrtc.New(f, nil))
	_, err = b3.Compile(core.CompileSpec{Source: "x", Entry: "k<", Grid: core.GridRule{Blocks: 1}})
	requireErrKind(t, err, core.ErrInvalidArgument, "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID")
}

func TestCompileRefusesAnEntryTheImageLacks(t *testing.T) {
	f := &fakeNVRTC{}
	b := openGPULike(t, nvrtc.New(f, nil))
	bad := &lyingNVRTC{fakeNVRTC: f}
	b2 := openGPULike(t, nvrtc.New(bad, nil))
	_, err := b.Compile(core.CompileSpec{Source: "x", Entry: "k", Grid: core.GridRule{Blocks: 1}})
	require.NoError(t, err)
	_, err = b2.Compile(core.CompileSpec{Source: "x", Entry: "k", Grid: core.GridRule{Blocks: 1}})
	requireErrKind(t, err, core.ErrDriver, "entry")
}

// lyingNVRTC returns an image without the symbol it reports.
type lyingNVRTC struct{ *fakeNVRTC }

func (l *lyingNVRTC) Compile(r nvrtcapi.Request) (nvrtcapi.Output, error) {
	out, err := l.fakeNVRTC.Compile(r)
	out.Lowered = []string{"_Zother"}
	return out, err
}

const scaleTemplateSrc = `
template <typename T>
__global__ void scale(T *x, T a, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= a;
}
`

func TestCompileOnSimRefusesWhatNVRTCRefuses(t *testing.T) {
	// The error a compilation NVRTC refuses gets on a GPU's path.
	f := &fakeNVRTC{fail: &nvrtcapi.CompileError{Err: nvrtcapi.NVRTC_ERROR_COMPILATION, Log: "k.cu(1): error: expected a \";\"\n"}}
	_, gpuErr := openGPULike(t, nvrtc.New(f, nil)).Compile(core.CompileSpec{Source: "x", Entry: "k", Grid: core.GridRule{Blocks: 1}})
	var onGPU *core.Error
	require.ErrorAs(t, gpuErr, &onGPU)

	b, dev := openSim(t, sim.Config{})
	scaleParams := []core.ParamType{core.ParamBuffer, core.ParamFloat32, core.ParamInt32}
	for _, tt := range []struct {
		name string
		spec core.CompileSpec
		log  string
	}{
		{"entry not defined", core.CompileSpec{Source: saxpySrc, Entry: "sapxy", Params: saxpyParams},
			`sapxy.cu(1): error: identifier "sapxy" is undefined`},
		{"device function", core.CompileSpec{Name: "twice", Source: "__device__ float twice(float x) { return 2 * x; }", Entry: "twice",
			Params: []core.ParamType{core.ParamFloat32}}, `twice.cu(1): error: "twice" is not a __global__ function`},
		{"parameter count", core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams[:3]},
			`saxpy.cu(2): error: kernel "saxpy" takes 4 parameters, but Params declares 3`},
		{"parameter kind", core.CompileSpec{Source: saxpySrc, Entry: "saxpy",
			Params: []core.ParamType{core.ParamBuffer, core.ParamFloat32, core.ParamFloat32, core.ParamUint32}},
			`saxpy.cu(2): error: parameter 2 of "saxpy" (const float *x) is a pointer, but Params[1] is a scalar`},
		{"unbalanced braces", core.CompileSpec{Source: saxpySrc + "}\n", Entry: "saxpy", Params: saxpyParams},
			`saxpy.cu(6): error: unbalanced "}"`},
		{"unbalanced parentheses", core.CompileSpec{Source: strings.Replace(saxpySrc, "if (i < n)", "if (i < n", 1), Entry: "saxpy", Params: saxpyParams},
			`saxpy.cu(5): error: expected a ")" before this "}": the "(" on line 4 is not closed`},
		{"template without instance", core.CompileSpec{Source: scaleTemplateSrc, Entry: "scale", Params: scaleParams},
			`scale.cu(3): error: "scale" is a function template`},
		{"template instance kind", core.CompileSpec{Source: scaleTemplateSrc, Entry: "scale<float*>", Params: scaleParams},
			`error: parameter 2 of "scale" (T a) is a pointer`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Host, spec.Grid = saxpyTwin, core.GridRule{Blocks: 1}
			_, err := b.Compile(spec)
			e := requireErrKind(t, err, core.ErrInvalidArgument, tt.log, "Fix: correct the source where the compiler's log points")
			assert.Equal(t, onGPU.Kind, e.Kind, "the kind NVRTC's refusal gets on a GPU")
			assert.Equal(t, "Compile", e.Op)
			assert.Equal(t, 1, strings.Count(e.Error(), "Fix:"), e.Error())
			log, ok := nvrtc.IsCompileError(err)
			require.True(t, ok, "the compiler's log is reachable as on a GPU")
			assert.Contains(t, log, tt.log)
		})
	}
	assert.Zero(t, dev.Calls(sim.OpModuleLoad), "nothing refused was loaded")

	p, err := b.Compile(core.CompileSpec{Source: scaleTemplateSrc, Entry: "scale<float>", Params: scaleParams,
		Grid: core.GridRule{Blocks: 1}, Host: saxpyTwin})
	require.NoError(t, err, "a template instance that fits compiles")
	c, _ := p.Compiled()
	assert.Equal(t, core.Compiled{Target: "sim", Symbol: "scale_float_"}, c)
}
