package sim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

const saxpySource = `
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

var saxpyTypes = []driver.ParamType{driver.ParamBuffer, driver.ParamBuffer, driver.ParamFloat32, driver.ParamUint32}

func TestCompileAcceptsAndNamesTheEntry(t *testing.T) {
	dev := sim.New(sim.Config{})
	out, err := dev.Compile(nvrtcapi.Request{Name: "saxpy.cu", Source: saxpySource, NameExpressions: []string{"saxpy"}}, saxpyTypes)
	require.NoError(t, err)
	require.Equal(t, []string{"saxpy"}, out.Lowered)
	assert.Empty(t, out.Log)
	m, err := dev.ModuleLoad(out.Image)
	require.NoError(t, err)
	_, err = dev.ModuleFunction(m, out.Lowered[0])
	require.NoError(t, err, "the stand-in image declares the entry")
	require.NoError(t, dev.ModuleUnload(m))

	const tmpl = "#include \"scale.h\"\nSCALE_KERNEL(float)\ntemplate <typename T> __global__ void scale(T *x, T a, int n) {}\n"
	out, err = dev.Compile(nvrtcapi.Request{Source: tmpl, NameExpressions: []string{"scale<double>", "scale<short>", "scalef"},
		Headers: []nvrtcapi.Header{{Name: "scale.h", Source: "#define SCALE_KERNEL(T) /* function-like: not expanded */\n__global__ void NAME(float *x, float a, int n) {}\n"}},
		Options: []string{"-DNAME=scalef", "--use_fast_math", "-DUNUSED"}},
		[]driver.ParamType{driver.ParamBuffer, driver.ParamInt16, driver.ParamInt32})
	require.NoError(t, err)
	assert.Equal(t, []string{"scale_double_", "scale_short_", "scalef"}, out.Lowered)
}

func TestCompileRefusesAsNVRTCDoes(t *testing.T) {
	dev := sim.New(sim.Config{})
	for _, tt := range []struct {
		name   string
		src    string
		entry  string
		params []driver.ParamType
		line   string // the log's first line up to the message
		msg    string // how the message starts
	}{
		{"undefined entry", saxpySource, "saxpx", saxpyTypes, "saxpy.cu(1): error: ", `identifier "saxpx" is undefined`},
		{"count", saxpySource, "saxpy", saxpyTypes[:3], "saxpy.cu(2): error: ", `kernel "saxpy" takes 4 parameters, but Params declares 3`},
		{"kind", saxpySource, "saxpy", []driver.ParamType{driver.ParamBuffer, driver.ParamUint64, driver.ParamFloat32, driver.ParamUint32},
			"saxpy.cu(2): error: ", "parameter 2 of \"saxpy\" (const float *x) is a pointer, but Params[1] is a scalar"},
		{"braces", strings.Replace(saxpySource, "y[i];\n}", "y[i];\n", 1), "saxpy", saxpyTypes, "saxpy.cu(4): error: ", `expected a "}" at the end of the file`},
		{"not C", "this is not C ( at all", "saxpy", saxpyTypes, "saxpy.cu(1): error: ", `expected a ")"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dev.Compile(nvrtcapi.Request{Name: "saxpy.cu", Source: tt.src, NameExpressions: []string{tt.entry}}, tt.params)
			var ce *nvrtcapi.CompileError
			require.ErrorAs(t, err, &ce)
			assert.True(t, errors.Is(err, nvrtcapi.NVRTC_ERROR_COMPILATION))
			first, _, _ := strings.Cut(ce.Log, "\n")
			assert.True(t, strings.HasPrefix(first, tt.line+tt.msg), "log starts %q", first)
			assert.True(t, strings.HasSuffix(ce.Log, "\n1 error detected in the compilation of \"saxpy.cu\".\n"), ce.Log)
		})
	}
	assert.True(t, dev.Live().Zero(), "a refused compilation leaves nothing on the device")

	_, err := dev.Compile(nvrtcapi.Request{Source: saxpySource}, saxpyTypes)
	assert.ErrorIs(t, err, nvrtcapi.NVRTC_ERROR_INVALID_INPUT, "no name expression")
	_, err = dev.Compile(nvrtcapi.Request{Source: saxpySource, NameExpressions: []string{"saxpy", "other", "saxpy<int>"}}, saxpyTypes)
	var ce *nvrtcapi.CompileError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Log, "program.cu(1): error: identifier \"other\" is undefined")
	assert.Contains(t, ce.Log, "\n2 errors detected in the compilation of \"program.cu\".\n", "each entry's errors are listed")
}
