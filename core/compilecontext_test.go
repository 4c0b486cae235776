package core_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/diskcache"
	"github.com/vyre-go/vyrecuda/nvrtc"
	"github.com/vyre-go/vyrecuda/nvrtcapi"
)

func saxpySpec() core.CompileSpec {
	return core.CompileSpec{Source: saxpySrc, Entry: "saxpy", Params: saxpyParams, Grid: core.GridRule{ElemSize: 4}, Host: saxpyTwin}
}

func TestCompileContextAlreadyDoneCompilesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b, dev := openSim(t, sim.Config{})
	_, err := b.CompileContext(ctx, saxpySpec())
	e := requireErrKind(t, err, core.ErrInFlight, `program "saxpy" was not compiled`)
	assert.Equal(t, "CompileContext", e.Op)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, dev.Calls(sim.OpModuleLoad))

	f := &fakeNVRTC{}
	g := openGPULike(t, nvrtc.New(f, nil))
	_, err = g.CompileContext(ctx, saxpySpec())
	requireErrKind(t, err, core.ErrInFlight)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, f.calls, "NVRTC was not called")

	var nilCtx context.Context // a nil context is exactly what is being refused
	_, err = b.CompileContext(nilCtx, saxpySpec())
	requireErrKind(t, err, core.ErrInvalidArgument, "context is nil")
	_, err = b.CompileContext(ctx, core.CompileSpec{Entry: "saxpy"})
	requireErrKind(t, err, core.ErrInvalidArgument, "no source")
}

func TestCompileContextDeadlineLeavesNothingBehind(t *testing.T) {
	const delay = 400 * time.Millisecond
	b, dev := openSim(t, sim.Config{CompileDelay: delay})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := b.CompileContext(ctx, saxpySpec())
	e := requireErrKind(t, err, core.ErrInFlight, `stopped waiting for program "saxpy" to compile`)
	assert.Equal(t, "CompileContext", e.Op)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, dev.Calls(sim.OpModuleLoad), "nothing was loaded for the dropped compilation")

	require.NoError(t, b.Close(), "Close waits for the compilation still running")
	stacks := make([]byte, 1<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	assert.False(t, strings.Contains(string(stacks), "sim.(*Device).Compile"), "the compilation's goroutine outlived Close")
	assert.Zero(t, dev.Calls(sim.OpModuleLoad), "the finished compilation's result was dropped")
	sim.RequireNoLeaks(t, dev)
}

func TestCompileContextReturnsWhatFinishesInTime(t *testing.T) {
	b, _ := openSim(t, sim.Config{CompileDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := b.CompileContext(ctx, saxpySpec())
	require.NoError(t, err)
	c, ok := p.Compiled()
	require.True(t, ok)
	assert.Equal(t, "sim", c.Target)

	x, err := core.AllocSlice[float32](b, 3)
	require.NoError(t, err)
	y, err := core.AllocSlice[float32](b, 3)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, x, []float32{1, 2, 3}))
	require.NoError(t, core.UploadSlice(b, y, []float32{1, 1, 1}))
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(y), core.ArgBuffer(x), core.ArgFloat32(2), core.ArgUint32(3)}}))
	got, err := core.DownloadSlice[float32](b, y, nil)
	require.NoError(t, err)
	assert.Equal(t, []float32{3, 5, 7}, got)
	require.NoError(t, b.Free(x))
	require.NoError(t, b.Free(y))
}

// blockingNVRTC holds its first compilation until released.
type blockingNVRTC struct {
	*fakeNVRTC
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (s *blockingNVRTC) Compile(r nvrtcapi.Request) (nvrtcapi.Output, error) {
	s.once.Do(func() {
		close(s.started)
		<-s.release
	})
	return s.fakeNVRTC.Compile(r)
}

func TestCompileContextCancelledOnTheNVRTCPathStillFillsTheCache(t *testing.T) {
	dir := t.TempDir()
	cache := func() *diskcache.Cache {
		c, err := diskcache.Open(dir, 1<<20)
		require.NoError(t, err)
		return c
	}
	slow := &blockingNVRTC{fakeNVRTC: &fakeNVRTC{}, started: make(chan struct{}), release: make(chan struct{})}
	b := openGPULike(t, nvrtc.New(slow, cache()))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-slow.started:
		case <-time.After(time.Minute):
		}
		cancel()
	}()
	spec := saxpySpec()
	spec.Host = nil
	_, err := b.CompileContext(ctx, spec)
	requireErrKind(t, err, core.ErrInFlight)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)

	close(slow.release)
	require.NoError(t, b.Close(), "Close waits for the compilation the caller stopped waiting for")
	assert.Equal(t, 1, slow.calls)

	f := &fakeNVRTC{}
	again := openGPULike(t, nvrtc.New(f, cache()))
	p, err := again.Compile(spec)
	require.NoError(t, err)
	c, _ := p.Compiled()
	assert.True(t, c.Cached, "the dropped compilation's result reached the disk cache")
	assert.Zero(t, f.calls)
}
