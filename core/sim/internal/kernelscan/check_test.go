package kernelscan

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	P = Pointer
	S = Scalar
)

const saxpy = `
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}
`

const scaleTemplate = `
template <typename T>
__global__ void scale(T *x, T a, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] *= a;
}
`

// TestCheckAccepts lists sources NVRTC compiles, which the scanner must
// accept with the parameters they declare.
func TestCheckAccepts(t *testing.T) {
	for _, tt := range []struct {
		name   string
		src    string
		entry  string
		params []Kind
		hdrs   map[string]string
		defs   map[string]string
	}{
		{"plain", saxpy, "saxpy", []Kind{P, P, S, S}, nil, nil},
		{"address-of", saxpy, " &saxpy ", []Kind{P, P, S, S}, nil, nil},
		{"template", scaleTemplate, "scale<double>", []Kind{P, S, S}, nil, nil},
		{"template pointer argument", scaleTemplate, "scale<float *>", []Kind{P, P, S}, nil, nil},
		{"template two params", "template<typename T, int N> __global__ void k(T v) {}", "k<float, 4>", []Kind{S}, nil, nil},
		{"template default", "template<typename T = float> __global__ void k(T *v) {}", "k<>", []Kind{P}, nil, nil},
		{"template pack", "template<typename... Ts> __global__ void k(int n) {}", "k<int, float, char>", []Kind{S}, nil, nil},
		{"no params", "__global__ void k() {}", "k", nil, nil, nil},
		{"void params", "__global__ void k(void) {}", "k", nil, nil, nil},
		{"launch bounds", "__global__ void __launch_bounds__(256, 2) k(float *p) { p[0] = 1; }", "k", []Kind{P}, nil, nil},
		{"attribute first", "__global__ __launch_bounds__(128) void k(float *__restrict__ p) {}", "k", []Kind{P}, nil, nil},
		{"array param", "__global__ void k(float p[], int n) {}", "k", []Kind{P, S}, nil, nil},
		{"unnamed params", "__global__ void k(float*, int) {}", "k", []Kind{P, S}, nil, nil},
		{"static and newline", "static __global__\nvoid\nk(\n  double *d,\n  long long n)\n{\n}\n", "k", []Kind{P, S}, nil, nil},
		{"namespace", "namespace ops { __global__ void k(int *p) {} }", "ops::k", []Kind{P}, nil, nil},
		{"nested namespace", "namespace a::b { __global__ void k(int *p) {} }", "a::b::k", []Kind{P}, nil, nil},
		{"anonymous namespace", "namespace { __global__ void k(int *p) {} }", "k", []Kind{P}, nil, nil},
		{"inline namespace", "namespace a { inline namespace v1 { __global__ void k(int *p) {} } }", "a::k", []Kind{P}, nil, nil},
		{"using namespace", "namespace a { __global__ void k(int *p) {} }\nusing namespace a;", "k", []Kind{P}, nil, nil},
		{"extern C block", "extern \"C\" {\n__global__ void k(int *p) {}\n}", "k", []Kind{P}, nil, nil},
		{"declared then defined", "__global__ void k(int *p);\n__global__ void k(int *p) { *p = 1; }", "k", []Kind{P}, nil, nil},
		{"overloads", "__global__ void k(int *p) {}\n__global__ void k(int n) {}", "k", []Kind{S}, nil, nil},
		{"typedef pointer", "typedef float *fptr;\n__global__ void k(fptr p, int n) {}", "k", []Kind{P, S}, nil, nil},
		{"using pointer", "using fptr = const float*;\n__global__ void k(fptr p) {}", "k", []Kind{P}, nil, nil},
		{"typedef scalar", "typedef unsigned long long u64;\n__global__ void k(u64 n) {}", "k", []Kind{S}, nil, nil},
		{"function pointer typedef", "typedef void (*cb)(int);\n__global__ void k(cb f) {}", "k", []Kind{P}, nil, nil},
		{"template type argument", "template<typename T> struct V { T x, y; };\n__global__ void k(V<float*> v, V<int> *w) {}", "k", []Kind{S, P}, nil, nil},
		{"default argument", "__global__ void k(int n = 2 * 3, float *p = nullptr) {}", "k", []Kind{S, P}, nil, nil},
		{"object macro", "#define KERNEL extern \"C\" __global__\n#define PTR float *\nKERNEL void k(PTR p) {}", "k", []Kind{P}, nil, nil},
		{"define option", "__global__ void NAME(float *p) {}", "vadd", []Kind{P}, nil, map[string]string{"NAME": "vadd"}},
		{"ifdef option", "#ifdef WIDE\n__global__ void k(double *p, int n) {\n#else\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P, S}, nil, map[string]string{"WIDE": ""}},
		{"ifdef unset", "#ifdef WIDE\n__global__ void k(double *p, int n) {\n#else\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P}, nil, nil},
		// Each of these reads one branch only: reading both leaves a "{" open.
		{"ifndef unknown", "#ifndef NARROW\n__global__ void k(double *p, int n) {\n#else\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P, S}, nil, nil},
		{"if not defined", "#if !defined(NARROW)\n__global__ void k(double *p, int n) {\n#elif 1\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P, S}, nil, nil},
		{"elif picks", "#if defined NARROW\n__global__ void k(double *p, int n) {\n#elif 1\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P}, nil, nil},
		{"if not 1", "#if !1\n__global__ void k(double *p, int n) {\n#else\n__global__ void k(float *p) {\n#endif\n}", "k", []Kind{P}, nil, nil},
		{"ifdef predefined", "#ifdef __CUDACC_RTC__\n__global__ void k(int *p) {\n#else\n__global__ void k(int *p, int n) {\n#endif\n}", "k", []Kind{P}, nil, nil},
		{"nested inactive", "#if 0\n#ifdef X\n{\n#else\n{\n#endif\n#endif\n__global__ void k(int *p) {}", "k", []Kind{P}, nil, nil},
		{"if 0", "#if 0\n__global__ void k( {\n#endif\n__global__ void k(int *p) {}", "k", []Kind{P}, nil, nil},
		{"arch guard", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n#define X 1\n#endif\n__global__ void k(int *p) {}", "k", []Kind{P}, nil, nil},
		{"header kernel", "#include \"k.h\"\n", "k", []Kind{P, S}, map[string]string{"k.h": "#pragma once\n__global__ void k(float *p, int n) { }\n"}, nil},
		{"header macro", "#include <fill.h>\n__global__ void k(FILL_T p) {}", "k", []Kind{P}, map[string]string{"fill.h": "#define FILL_T unsigned char *\n"}, nil},
		{"braces in comments and literals", "// }\n/* ( */\n__global__ void k(char *p) { const char *s = \"}{)(\"; char c = '}'; p[0] = c; }", "k", []Kind{P}, nil, nil},
		{"raw string", "__global__ void k(int *p) { const char *s = R\"x(}))\"{)x\"; }", "k", []Kind{P}, nil, nil},
		{"digit separator", "__global__ void k(int *p) { p[0] = 1'000'000; char c = '\\''; }", "k", []Kind{P}, nil, nil},
		{"line splice", "#define LONG_MACRO \\\n  (1 + \\\n   2)\n__global__ void k(int *p) { p[0] = LONG_MACRO; }", "k", []Kind{P}, nil, nil},
		{"explicit specialization", "template<typename T> __global__ void k(T *p) {}\ntemplate<> __global__ void k<int>(int *p) {}", "k<int>", []Kind{P}, nil, nil},
		{"any kind", saxpy, "saxpy", []Kind{Any, Any, Any, S}, nil, nil},
		{"function-like macro left alone", "#define SQ(x) ((x)*(x))\n__global__ void k(float *p) { p[0] = SQ(p[1]); }", "k", []Kind{P}, nil, nil},
		{"trailing attributes", "__global__ void k(float *p) noexcept [[maybe_unused]] {}", "k", []Kind{P}, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Check(Input{File: "k.cu", Source: tt.src, Entry: tt.entry, Params: tt.params, Headers: tt.hdrs, Defines: tt.defs})
			assert.Empty(t, d)
		})
	}
}

// TestCheckRefuses lists sources NVRTC (or the declared parameters)
// refuses, each with where the error is placed and words of its message.
func TestCheckRefuses(t *testing.T) {
	for _, tt := range []struct {
		name   string
		src    string
		entry  string
		params []Kind
		file   string
		line   int
		want   string
	}{
		{"undefined entry", saxpy, "saxpyy", []Kind{P, P, S, S}, "k.cu", 1, `identifier "saxpyy" is undefined`},
		{"device function", "__device__ float f(float x) { return x; }\n", "f", []Kind{S}, "k.cu", 1, `"f" is not a __global__ function`},
		{"host function", "\nvoid helper(int *p) {}", "helper", []Kind{P}, "k.cu", 2, "not a __global__ function"},
		{"namespace not spelled", "namespace ops {\n__global__ void k(int *p) {} }", "k", []Kind{P}, "k.cu", 1, `the kernel on line 2 of k.cu is "ops::k"`},
		{"only declared", "\n__global__ void k(int *p);", "k", []Kind{P}, "k.cu", 2, "declared but never defined"},
		{"too few params", saxpy, "saxpy", []Kind{P, P, S}, "k.cu", 2, `kernel "saxpy" takes 4 parameters, but Params declares 3`},
		{"too many params", saxpy, "saxpy", []Kind{P, P, S, S, S}, "k.cu", 2, "takes 4 parameters, but Params declares 5"},
		{"no params declared", saxpy, "saxpy", nil, "k.cu", 2, "Params declares 0"},
		{"scalar for pointer", saxpy, "saxpy", []Kind{P, S, S, S}, "k.cu", 2, `parameter 2 of "saxpy" (const float *x) is a pointer, but Params[1] is a scalar`},
		{"pointer for scalar", saxpy, "saxpy", []Kind{P, P, P, S}, "k.cu", 2, `parameter 3 of "saxpy" (float a) is a scalar, but Params[2] is a pointer`},
		{"template without instance", scaleTemplate, "scale", []Kind{P, S, S}, "k.cu", 3, "is a function template: the entry must name an instance"},
		{"template wrong instance kind", scaleTemplate, "scale<float*>", []Kind{P, S, S}, "k.cu", 3, "parameter 2"},
		{"template too many args", scaleTemplate, "scale<float, int>", []Kind{P, S, S}, "k.cu", 3, "takes 1 template arguments, the entry gives 2"},
		{"not a template", saxpy, "saxpy<float>", []Kind{P, P, S, S}, "k.cu", 2, `"saxpy" is not a template`},
		{"bad name expression", saxpy, "saxpy<", []Kind{P, P, S, S}, "k.cu", 1, `name expression "saxpy<" is not valid`},
		{"name expression not a name", saxpy, "1+2", nil, "k.cu", 1, "is not valid"},
		{"unbalanced template args", saxpy, "scale<a<b>", nil, "k.cu", 1, "not balanced"},
		{"unclosed brace", "__global__ void k(int *p) {\n\tif (p) {\n\t\tp[0] = 1;\n}\n", "k", []Kind{P}, "k.cu", 4, `expected a "}" at the end of the file: the "{" on line 1 is never closed`},
		{"unclosed paren", "__global__ void k(int *p) {\n\tf(p;\n}\n", "k", []Kind{P}, "k.cu", 3, `expected a ")" before this "}": the "(" on line 2 is not closed`},
		{"paren open at the end", "__global__ void k(int *p {\n}\n", "k", []Kind{P}, "k.cu", 2, `expected a ")" at the end of the file: the "(" on line 1 is never closed`},
		{"stray closer", "__global__ void k(int *p) {}\n}\n", "k", []Kind{P}, "k.cu", 2, `unbalanced "}"`},
		{"mismatched bracket", "__global__ void k(int *p) { p[0) = 1; }", "k", []Kind{P}, "k.cu", 1, `expected a "]" before this ")"`},
		{"unclosed comment", "__global__ void k(int *p) {}\n/* never\nclosed", "k", []Kind{P}, "k.cu", 2, "comment is never closed"},
		{"unclosed string", "__global__ void k(int *p) {\n const char *s = \"abc;\n}", "k", []Kind{P}, "k.cu", 2, "missing closing quote"},
		{"unclosed char", "__global__ void k(int *p) { char c = 'a; }", "k", []Kind{P}, "k.cu", 1, "character literal is never closed"},
		{"unclosed raw string", "__global__ void k(int *p) {}\nconst char *s = R\"(abc", "k", []Kind{P}, "k.cu", 2, "raw string literal is never closed"},
		{"error directive", "#error needs C++17\n__global__ void k(int *p) {}", "k", []Kind{P}, "k.cu", 1, "#error directive: needs C++17"},
		{"if without endif", "\n#ifdef X\n__global__ void k(int *p) {}", "k", []Kind{P}, "k.cu", 2, "#if has no #endif"},
		{"endif without if", "#endif\n__global__ void k(int *p) {}", "k", []Kind{P}, "k.cu", 1, "#endif without #if"},
		{"header unbalanced", "#include \"h.h\"\n__global__ void k(int *p) {}", "k", []Kind{P}, "h.h", 2, `unbalanced ")"`},
		{"text that is not C", "this is not C at all (", "k", nil, "k.cu", 1, `expected a ")"`},
		{"empty parameter", "__global__ void k(int *p, ) {}", "k", []Kind{P, S}, "k.cu", 1, "expected a declaration of parameter 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Check(Input{File: "k.cu", Source: tt.src, Entry: tt.entry, Params: tt.params,
				Headers: map[string]string{"h.h": "#pragma once\nint f());\n"}})
			require.NotEmpty(t, d)
			assert.Equal(t, tt.file, d[0].File)
			assert.Equal(t, tt.line, d[0].Line)
			assert.Contains(t, d[0].Msg, tt.want)
		})
	}
}

func TestDiagQuotesTheLine(t *testing.T) {
	d := Check(Input{File: "k.cu", Source: saxpy, Entry: "saxpy", Params: []Kind{P, S, S, S}})
	require.Len(t, d, 1)
	assert.Equal(t, `extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {`, d[0].Text)
	d = Check(Input{File: "k.cu", Source: saxpy, Entry: "saxpy", Params: []Kind{S, S, P, S}})
	assert.Len(t, d, 3, "every mismatched parameter is reported: %v", d)
}

func TestMacroBombStaysCheap(t *testing.T) {
	var sb strings.Builder
	for i := range 40 {
		sb.WriteString("#define M" + strconv.Itoa(i) + " M" + strconv.Itoa(i+1) + " M" + strconv.Itoa(i+1) + "\n")
	}
	sb.WriteString("__global__ void k(int *p) { M0; }\n")
	d := Check(Input{File: "k.cu", Source: sb.String(), Entry: "k", Params: []Kind{P}})
	assert.Empty(t, d)
	d = Check(Input{File: "k.cu", Source: "#define A B\n#define B A\n__global__ void k(int *p) { A; }", Entry: "k", Params: []Kind{P}})
	assert.Empty(t, d, "a macro is not expanded inside itself")
}

// TestBuiltinKernelSources checks the project's own kernels, which NVRTC
// and nvcc compile, with the parameters their programs declare.
func TestBuiltinKernelSources(t *testing.T) {
	want := map[string][]Kind{
		"vyre_copy_u32":  {P, P, S},
		"vyre_fill_u32":  {P, S, S},
		"vyre_scale_f32": {P, P, S, S},
		"vyre_vadd_u32":  {P, P, P, S},
		"vyre_scatter":   {P, P, S},
		"vyre_gather":    {P, P, S},
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "kernels", "*.cu"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	seen := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for entry, params := range want {
			if !strings.Contains(string(src), entry+"(") {
				continue
			}
			seen++
			d := Check(Input{File: filepath.Base(f), Source: string(src), Entry: entry, Params: params})
			assert.Empty(t, d, "%s in %s", entry, f)
		}
	}
	assert.Equal(t, len(want), seen)
}
