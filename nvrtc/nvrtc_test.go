package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/diskcache"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

// fakeTC records requests and returns an image that spells them out, so a
// test can tell which request produced a result.
type fakeTC struct {
	mu     sync.Mutex
	archs  []int
	reqs   []nvrtcapi.Request
	fail   error
	major  int
	noArch bool
}

func (f *fakeTC) Version() (int, int, error) { return max(f.major, 13), 0, nil }
func (f *fakeTC) SupportedArchs() ([]int, error) {
	if f.noArch {
		return nil, &nvrtcapi.MissingSymbolError{Symbol: "nvrtcGetNumSupportedArchs"}
	}
	return f.archs, nil
}
func (f *fakeTC) Compile(r nvrtcapi.Request) (nvrtcapi.Output, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	if f.fail != nil {
		return nvrtcapi.Output{}, f.fail
	}
	img := fmt.Sprintf("image cubin=%v opts=%s code=%s", r.CUBIN, strings.Join(r.Options, " "), r.Source)
	return nvrtcapi.Output{Image: []byte(img), Lowered: []string{"_Z" + r.NameExpressions[0]}, Log: "warning: none"}, nil
}

func TestChooseTarget(t *testing.T) {
	archs := []int{75, 80, 86, 89, 90, 100, 120}
	for _, tt := range []struct {
		cc     int
		archs  []int
		target string
		cubin  bool
		ok     bool
	}{
		{90, archs, "sm_90", true, true},
		{75, archs, "sm_75", true, true},
		{87, archs, "compute_86", false, true}, // between two supported: PTX for the one below
		{130, archs, "compute_120", false, true},
		{70, archs, "", false, false}, // older than everything
		{61, nil, "compute_61", false, true},
	} {
		target, cubin, ok := ChooseTarget(tt.cc, tt.archs)
		assert.Equal(t, tt.target, target, "cc %d", tt.cc)
		assert.Equal(t, tt.cubin, cubin, "cc %d", tt.cc)
		assert.Equal(t, tt.ok, ok, "cc %d", tt.cc)
	}
}

func newCache(t *testing.T, dir string) *diskcache.Cache {
	c, err := diskcache.Open(dir, 1<<20)
	require.NoError(t, err)
	return c
}

func TestCompileTargetsAndOptions(t *testing.T) {
	tc := &fakeTC{archs: []int{90, 75, 80}}
	c := New(tc, nil)
	src := Source{Code: "k", Entry: "scale<double>", Options: Options{
		Defines: map[string]string{"N": "4", "FLAG": ""}, FastMath: true, Std: "c++17", LineInfo: true,
		Headers: map[string]string{"b.h": "B", "a.h": "A"}, Extra: []string{"-G"},
	}}
	r, err := c.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.True(t, r.CUBIN)
	assert.Equal(t, "sm_90", r.Target)
	assert.Equal(t, "_Zscale<double>", r.Symbol)
	assert.Equal(t, "warning: none", r.Log)
	require.Len(t, tc.reqs, 1)
	q := tc.reqs[0]
	assert.Equal(t, []string{"-DFLAG", "-DN=4", "--use_fast_math", "-std=c++17", "-lineinfo", "-G", "-arch=sm_90"}, q.Options)
	assert.Equal(t, []nvrtcapi.Header{{Name: "a.h", Source: "A"}, {Name: "b.h", Source: "B"}}, q.Headers)
	assert.Equal(t, []string{"scale<double>"}, q.NameExpressions)
	assert.Equal(t, "kernel.cu", q.Name)

	r, err = c.Compile(src, 8, 7)
	require.NoError(t, err)
	assert.False(t, r.CUBIN)
	assert.Equal(t, "compute_80", r.Target)
	assert.Contains(t, tc.reqs[1].Options, "-arch=compute_80")

	_, err = c.Compile(src, 7, 0)
	var ud *UnsupportedDeviceError
	require.ErrorAs(t, err, &ud)
	assert.Contains(t, err.Error(), "7.0")
	assert.Len(t, tc.reqs, 2, "an unsupported device compiles nothing")

	_, err = c.Compile(Source{Code: "k"}, 9, 0)
	assert.ErrorContains(t, err, "Fix:")
	for _, o := range []string{"-arch=sm_80", "--gpu-architecture=compute_80", "-arch", "sm_80"} {
		_, err = c.Compile(Source{Code: "k", Entry: "k", Options: Options{Extra: []string{"-G", o}}}, 9, 0)
		if o == "sm_80" {
			assert.NoError(t, err, "a bare value is not an architecture option")
			continue
		}
		assert.ErrorContains(t, err, "chooses the architecture", o)
	}
}

func TestSourceRequest(t *testing.T) {
	src := Source{Code: "c", Entry: "k<int>", Options: Options{Defines: map[string]string{"A": ""}, Headers: map[string]string{"z.h": "Z", "a.h": "A"}}}
	req, err := src.Request("sm_90", true)
	require.NoError(t, err)
	assert.Equal(t, nvrtcapi.Request{Source: "c", Name: "kernel.cu", Headers: []nvrtcapi.Header{{Name: "a.h", Source: "A"}, {Name: "z.h", Source: "Z"}},
		Options: []string{"-DA", "-arch=sm_90"}, NameExpressions: []string{"k<int>"}, CUBIN: true}, req)
	src.Name = "mine.cu"
	req, err = src.Request("", false)
	require.NoError(t, err)
	assert.Equal(t, "mine.cu", req.Name)
	assert.Equal(t, []string{"-DA"}, req.Options, "no target: no -arch")
	_, err = Source{Code: "c"}.Request("", false)
	assert.ErrorContains(t, err, "no entry")
	_, err = Source{Code: "c", Entry: "k", Options: Options{Extra: []string{"-arch=sm_80"}}}.Request("", false)
	assert.ErrorContains(t, err, "chooses the architecture")
}

func TestOldNVRTCWithoutArchListGetsPTX(t *testing.T) {
	tc := &fakeTC{noArch: true}
	r, err := New(tc, nil).Compile(Source{Code: "k", Entry: "k"}, 8, 6)
	require.NoError(t, err)
	assert.Equal(t, "compute_86", r.Target)
	assert.False(t, r.CUBIN)
}

func TestDiskCacheSecondCompilerCompilesNothing(t *testing.T) {
	dir := t.TempDir()
	tc1 := &fakeTC{archs: []int{90}}
	a := New(tc1, newCache(t, dir))
	src := Source{Code: "__global__ void k(){}", Entry: "k", Options: Options{Defines: map[string]string{"A": "1"}}}
	first, err := a.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.False(t, first.Cached)
	assert.Equal(t, uint64(1), a.Calls())

	tc2 := &fakeTC{archs: []int{80, 90}}
	b := New(tc2, newCache(t, dir)) // as a second process would
	second, err := b.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.True(t, second.Cached)
	assert.Empty(t, tc2.reqs, "the second compiler ran no compilation")
	assert.Equal(t, uint64(0), b.Calls())
	assert.Equal(t, uint64(1), b.CacheHits())
	assert.Equal(t, first.Image, second.Image)
	assert.Equal(t, first.Symbol, second.Symbol)

	// Every input is part of the key: changing any one compiles afresh.
	for name, s := range map[string]Source{
		"code":    {Code: src.Code + " ", Entry: "k", Options: src.Options},
		"entry":   {Code: src.Code, Entry: "k2", Options: src.Options},
		"define":  {Code: src.Code, Entry: "k", Options: Options{Defines: map[string]string{"A": "2"}}},
		"header":  {Code: src.Code, Entry: "k", Options: Options{Defines: src.Options.Defines, Headers: map[string]string{"h": "x"}}},
		"name":    {Name: "other.cu", Code: src.Code, Entry: "k", Options: src.Options},
		"fastmth": {Code: src.Code, Entry: "k", Options: Options{Defines: src.Options.Defines, FastMath: true}},
	} {
		before := len(tc2.reqs)
		r, err := b.Compile(s, 9, 0)
		require.NoError(t, err, name)
		assert.False(t, r.Cached, name)
		assert.Len(t, tc2.reqs, before+1, name)
	}
	// A different NVRTC version or target misses too.
	c := New(&fakeTC{archs: []int{90}, major: 14}, newCache(t, dir))
	r, err := c.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.False(t, r.Cached)
	r, err = b.Compile(src, 8, 0)
	require.NoError(t, err)
	assert.False(t, r.Cached)
}

func TestHeaderContentsAreInTheKey(t *testing.T) {
	dir := t.TempDir()
	tc := &fakeTC{archs: []int{90}}
	c := New(tc, newCache(t, dir))
	src := func(h string) Source {
		return Source{Code: "#include \"k.h\"\n__global__ void k(){}", Entry: "k",
			Options: Options{Headers: map[string]string{"k.h": h}}}
	}
	one := []string{"v1", "v1", "v2", "v1"}
	want := []bool{false, true, false, true}
	for i, h := range one {
		r, err := c.Compile(src(h), 9, 0)
		require.NoError(t, err, "compile %d", i)
		assert.Equal(t, want[i], r.Cached, "compile %d with header %q", i, h)
	}
	assert.Equal(t, uint64(2), c.Calls(), "a header whose contents changed under the same name compiles afresh")
	require.Len(t, tc.reqs, 2)
	assert.Equal(t, "v2", tc.reqs[1].Headers[0].Source)

	ka := cacheKey("13.0", "sm_90", "k.cu", "c", "k", nil, []nvrtcapi.Header{{Name: "k.h", Source: "v1"}})
	kb := cacheKey("13.0", "sm_90", "k.cu", "c", "k", nil, []nvrtcapi.Header{{Name: "k.h", Source: "v2"}})
	assert.NotEqual(t, ka, kb)
}

func TestCorruptCacheEntryRecompiles(t *testing.T) {
	dir := t.TempDir()
	tc := &fakeTC{archs: []int{90}}
	c := New(tc, newCache(t, dir))
	src := Source{Code: "k", Entry: "k"}
	_, err := c.Compile(src, 9, 0)
	require.NoError(t, err)
	files, _ := filepath.Glob(filepath.Join(dir, "*.entry"))
	require.Len(t, files, 1)
	raw, _ := os.ReadFile(files[0])
	raw[len(raw)-1] ^= 0xff
	require.NoError(t, os.WriteFile(files[0], raw, 0o600))
	r, err := c.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.False(t, r.Cached)
	assert.Len(t, tc.reqs, 2)
	r, err = c.Compile(src, 9, 0)
	require.NoError(t, err)
	assert.True(t, r.Cached, "the rewritten entry is used")
}

func TestCompileErrorsPassThroughUncached(t *testing.T) {
	dir := t.TempDir()
	tc := &fakeTC{archs: []int{90}, fail: &nvrtcapi.CompileError{Err: nvrtcapi.NVRTC_ERROR_COMPILATION, Log: "kernel.cu(2): error: identifier \"x\" is undefined\n"}}
	c := New(tc, newCache(t, dir))
	_, err := c.Compile(Source{Code: "k", Entry: "k"}, 9, 0)
	log, ok := IsCompileError(err)
	require.True(t, ok)
	assert.Equal(t, `kernel.cu(2): error: identifier "x" is undefined`, log)
	_, n := c.Cache().Usage()
	assert.Zero(t, n, "a failure is not cached")
	_, ok = IsCompileError(errors.New("other"))
	assert.False(t, ok)
}

func TestEntryEncoding(t *testing.T) {
	raw := encodeEntry("_Z1kPf", []byte{1, 2, 3})
	sym, img, ok := decodeEntry(raw)
	require.True(t, ok)
	assert.Equal(t, "_Z1kPf", sym)
	assert.Equal(t, []byte{1, 2, 3}, img)
	for _, bad := range [][]byte{nil, {0}, {5, 'a'}, encodeEntry("s", nil)} {
		_, _, ok := decodeEntry(bad)
		assert.False(t, ok, "%v", bad)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(CacheDirEnv, "/tmp/x")
	d, err := DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/x", d)
	t.Setenv(CacheDirEnv, "off")
	_, err = DefaultCacheDir()
	assert.Error(t, err)
	t.Setenv(CacheDirEnv, "")
	d, err = DefaultCacheDir()
	if err == nil {
		assert.True(t, strings.HasSuffix(d, filepath.Join("vyrecuda", "kernels")))
	}
}
