//go:build gpu

package nvrtcapi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGPUCompilePTXAndCUBIN(t *testing.T) {
	require.NoError(t, Loaded())
	major, minor, err := Version()
	require.NoError(t, err)
	t.Logf("NVRTC %d.%d", major, minor)
	archs, err := SupportedArchs()
	require.NoError(t, err)
	require.NotEmpty(t, archs)
	src := "template<typename T> __global__ void twice(T *x) { x[threadIdx.x] *= 2; }\n"
	out, err := Compile(Request{Source: src, Options: []string{"-arch=compute_75"}, NameExpressions: []string{"twice<float>"}})
	require.NoError(t, err)
	assert.Contains(t, string(out.Image), ".entry "+out.Lowered[0])
	assert.True(t, strings.HasPrefix(out.Lowered[0], "_Z"), out.Lowered[0])
	cub, err := Compile(Request{Source: src, Options: []string{"-arch=sm_90"}, NameExpressions: []string{"twice<int>"}, CUBIN: true})
	require.NoError(t, err)
	assert.Equal(t, []byte("\x7fELF"), cub.Image[:4])
	_, err = Compile(Request{Source: "__global__ void k() { int x = }\n", Name: "bad.cu"})
	var ce *CompileError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Log, "bad.cu(1)")
}
