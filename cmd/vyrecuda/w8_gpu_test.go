//go:build gpu

// W8 on a real GPU: the kernel compiled by NVRTC, every form run and its
// output checked, the floor launched through the driver directly. Times are
// not judged here (the bench does that); this checks the bench computes the
// right thing on the device it will be read from.

package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGPUBenchW8(t *testing.T) {
	s, err := openSession(deviceCUDA, 0, 0)
	require.NoError(t, err)
	cfg := defaultBenchConfig()
	cfg.W8Steps, cfg.W8Warmup = 20, 3
	step := 0
	rows, err := measureW8(s, cfg, nil, newProgress(io.Discard), &step, len(cfg.W8Sizes)*len(w8Forms))
	require.NoError(t, s.Close())
	require.NoError(t, err)
	require.Len(t, rows, len(cfg.W8Sizes)*len(w8Forms), "every form at every size, the floor included")
	for i, r := range rows {
		assert.Equal(t, w8Forms[i%len(w8Forms)].ID, r.Form)
		assert.Equal(t, int64(cfg.W8Sizes[i/len(w8Forms)]), r.Bytes)
		assert.True(t, r.Verified, "%s %d", r.Form, r.Bytes)
		assert.Positive(t, r.XFloor, "%s %d", r.Form, r.Bytes)
		assert.Positive(t, r.XCalls, "%s %d", r.Form, r.Bytes)
	}
}

// TestGPUBenchSweepJudgesAgainstThePageableCopy checks that on a GPU every
// sweep point carries the driver's pageable copy and a verdict against it,
// 4 and 16 KiB included.
func TestGPUBenchSweepJudgesAgainstThePageableCopy(t *testing.T) {
	out := t.TempDir()
	code, _, stderr := runCmd("bench", "-device", "cuda", "-workloads", "none", "-sweep-min", "4KiB", "-sweep-max", "64KiB", "-out", out)
	require.Equal(t, exitOK, code, stderr)
	js, err := os.ReadFile(filepath.Join(out, resultsFile))
	require.NoError(t, err)
	var rep benchReport
	require.NoError(t, json.Unmarshal(js, &rep))
	require.Len(t, rep.Sweep, 6)
	for _, p := range rep.Sweep {
		assert.Positive(t, p.DriverPageableGBps, "%s %d", p.Direction, p.Bytes)
		assert.NotNil(t, p.Meets, "%s %d", p.Direction, p.Bytes)
	}
}
