package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// checkError asserts the project's error standard on err: a *core.Error
// naming op, the call the user made, with exactly one "Fix:" sentence.
func checkError(t *testing.T, op string, err error) *core.Error {
	t.Helper()
	require.Error(t, err, op)
	var e *core.Error
	require.True(t, errors.As(err, &e), "%s: %T is not a *core.Error", op, err)
	assert.Equal(t, op, e.Op, "%s: the op must be the call made: %v", op, err)
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix:"), "%s: exactly one Fix: %v", op, err)
	assert.NotEmpty(t, e.Fix, op)
	return e
}

// Many error-producing calls, invalid input and injected driver failures
// alike, each report the public call made and exactly one Fix.
func TestErrorsNameThePublicCallWithOneFix(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(16)
	require.NoError(t, err)
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	db, err := d.Alloc(16)
	require.NoError(t, err)
	fill := core.ProgramFillU32()

	checkInvalidInputErrors(t, b, d, h, db, fill)
	checkDriverFailureErrors(t, b, dev, d, h, db, fill)
	checkPendingErrors(t, b, dev, h)

	require.NoError(t, d.Free(db))
	require.NoError(t, d.Close())
	require.NoError(t, b.Free(h))

	checkCloseFailureError(t)
}

// checkInvalidInputErrors makes calls with invalid input on the Backend and
// the dispatcher and checks each error names the call made with one Fix.
func checkInvalidInputErrors(t *testing.T, b *core.Backend, d *core.OptimizerDispatcher, h, db core.Buffer, fill *core.Program) {
	_, err := b.Alloc(0)
	checkError(t, "Alloc", err)
	checkError(t, "Free", b.Free(core.Buffer{ID: 1 << 60, Len: 3}))
	checkError(t, "UploadSlice", core.UploadSlice(b, h, make([]byte, 3)))
	checkError(t, "Upload", b.Upload(core.UploadAt{Buf: h, Offset: 10, Data: make([]byte, 10)})) // a range error: it wraps an accounting error with a Fix of its own
	checkError(t, "Upload", b.Upload(core.UploadAt{Buf: h, Data: []byte{1}}, core.UploadAt{Buf: h, Offset: -1, Data: []byte{1}}))
	_, err = b.Download(h.Slice(12, 8), nil)
	checkError(t, "Download", err)
	_, err = b.DownloadMany([]core.Range{{Buf: h, Offset: 1 << 40, Len: 1}}, nil)
	checkError(t, "DownloadMany", err)
	checkError(t, "UploadAsync", b.UploadAsync(core.UploadAt{Buf: h, Offset: 20, Data: make([]byte, 4)}))
	_, err = b.Run(core.Batch{Reads: []core.Range{{Buf: h, Offset: 8, Len: 16}}}, nil)
	checkError(t, "Run", err)
	_, err = b.RunAsync(core.Batch{Steps: []core.Step{{Program: nil}}})
	checkError(t, "RunAsync", err)
	checkError(t, "Dispatch", b.Dispatch(fill, []core.Buffer{h}, core.DispatchConfig{}))
	_, err = d.Alloc(-1)
	checkError(t, "Alloc", err)
	checkError(t, "Free", d.Free(h))
	checkError(t, "Free", b.Free(db))
	checkError(t, "Upload", b.Upload(core.UploadAt{Buf: db, Offset: 15, Data: []byte{1, 2}}))
	_, err = b.DownloadMany([]core.Range{db.Slice(9, 9)}, nil)
	checkError(t, "DownloadMany", err)
}

// checkDriverFailureErrors injects driver failures under Backend and
// dispatcher calls and checks each reaches the caller under the name of the
// call made; it also checks writes to a static set and a Pending's
// DeviceTime are refused the same way.
func checkDriverFailureErrors(t *testing.T, b *core.Backend, dev *sim.Device, d *core.OptimizerDispatcher, h, db core.Buffer, fill *core.Program) {
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	checkError(t, "Upload", b.Upload(core.UploadAt{Buf: db, Data: make([]byte, 16)}))
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err := b.Download(db.All(), nil)
	checkError(t, "Download", err)
	dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	_, err = d.Alloc(1 << 21)
	checkError(t, "Alloc", err)
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err = b.Run(core.Batch{Clears: []core.Buffer{db}}, nil)
	checkError(t, "Run", err)
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err = d.AcquireStaticUploads(1, [][]byte{{1, 2, 3}})
	checkError(t, "AcquireStaticUploads", err)
	checkError(t, "ReleaseStaticUploads", d.ReleaseStaticUploads(core.StaticSet{Bufs: []core.Buffer{{ID: 1 << 62, Len: 1}}}))
	set, err := d.AcquireStaticUploads(1, [][]byte{{1, 2, 3, 4}})
	require.NoError(t, err)
	checkError(t, "Upload", b.Upload(core.UploadAt{Buf: set.Bufs[0], Data: []byte{9}}))
	_, err = b.Run(core.Batch{Fills: []core.Fill{{Buf: set.Bufs[0], Value: 1}}}, nil)
	checkError(t, "Run", err)
	require.NoError(t, d.ReleaseStaticUploads(set))
	pd, err := b.DispatchAsync(fill, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
	require.NoError(t, err)
	_, err = pd.DeviceTime()
	checkError(t, "Pending.DeviceTime", err)
	require.NoError(t, pd.Close())
}

// checkPendingErrors fails the driver call under each Pending method and
// checks the error names that method and says RunAsync queued the work.
func checkPendingErrors(t *testing.T, b *core.Backend, dev *sim.Device, h core.Buffer) {
	for _, call := range []string{"Pending.Await", "Pending.AwaitInto", "Pending.Close", "Pending.IsReady"} {
		p, err := b.RunAsync(core.Batch{Clears: []core.Buffer{h}})
		require.NoError(t, err)
		if call == "Pending.IsReady" {
			dev.FailNth(sim.OpEventQuery, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		} else {
			dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		}
		switch call {
		case "Pending.Await":
			err = p.Await()
		case "Pending.AwaitInto":
			_, err = p.AwaitInto(nil)
		case "Pending.Close":
			err = p.Close()
		case "Pending.IsReady":
			_, err = p.IsReady()
		}
		e := checkError(t, call, err)
		assert.Contains(t, e.Detail, "work queued by RunAsync")
		require.NoError(t, p.Close())
	}
}

// checkCloseFailureError fails a free during Close on a fresh Backend and
// checks the error is Close's, names the failing part, and that a second
// Close frees what is left.
func checkCloseFailureError(t *testing.T) {
	b2, dev2 := openSim(t, sim.Config{})
	h2, err := b2.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, b2.Free(h2)) // into the device pool, which Close frees
	dev2.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	e := checkError(t, "Close", b2.Close())
	assert.Contains(t, e.Error(), "close device pool: MemFree failed")
	assert.Contains(t, e.Detail, "1 device pool block(s)")
	assert.Contains(t, e.Fix, "call Close again")
	assert.NotZero(t, b2.MemoryStats().Reserved, "the block Close could not free is still counted")
	require.NoError(t, b2.Close(), "a second Close frees what the first could not")
	assert.Zero(t, b2.MemoryStats().Reserved)
	assert.True(t, dev2.Live().Zero(), "nothing is left on the device: %s", dev2.Live())
}

// A Go twin's own error text and the simulated device's detail reach Error().
func TestErrorTextCarriesTheCause(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(16)
	require.NoError(t, err)
	twin := func(core.KernelMemory, core.LaunchConfig, []core.KernelArg) error {
		return errors.New("index 99 out of range in my kernel")
	}
	p, err := core.NewProgram(core.ProgramSpec{Image: kernels.FillPTX, Entry: kernels.FillEntry,
		Grid: core.GridRule{Blocks: 1}, Buffers: 1, Host: twin})
	require.NoError(t, err)
	err = b.Dispatch(p, []core.Buffer{h}, core.DispatchConfig{})
	e := checkError(t, "Dispatch", err)
	assert.Contains(t, err.Error(), "index 99 out of range in my kernel")
	assert.Equal(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, e.Code)

	missing, err := core.NewProgram(core.ProgramSpec{Image: kernels.FillPTX, Entry: "no_such_kernel",
		Grid: core.GridRule{Blocks: 1}, Buffers: 1, Host: twin})
	require.NoError(t, err)
	err = b.Dispatch(missing, []core.Buffer{h}, core.DispatchConfig{})
	checkError(t, "Dispatch", err)
	assert.Contains(t, err.Error(), `declares no entry "no_such_kernel"`)
	assert.Contains(t, err.Error(), "extern \"C\"", "the not-found Fix")
	require.NoError(t, b.Free(h))
}

// Each class of driver result gets its own Fix sentence.
func TestDriverFixPerResultClass(t *testing.T) {
	codes := map[cudaapi.Result]string{
		cudaapi.CUDA_ERROR_OUT_OF_MEMORY:   "free device memory",
		cudaapi.CUDA_ERROR_LAUNCH_FAILED:   "the kernel failed while it ran",
		cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS: "compute-sanitizer",
		cudaapi.CUDA_ERROR_INVALID_VALUE:   "out of range",
		cudaapi.CUDA_ERROR_NOT_FOUND:       "Entry names a kernel",
		cudaapi.CUDA_ERROR_NOT_INITIALIZED: "NVIDIA driver is installed",
		cudaapi.CUDA_ERROR_NO_DEVICE:       "NVIDIA driver is installed",
		cudaapi.CUDA_ERROR_NOT_SUPPORTED:   "lacks the feature",
		cudaapi.CUDA_ERROR_INVALID_HANDLE:  "stale",
		cudaapi.CUDA_ERROR_UNKNOWN:         "check the driver result",
	}
	fixes := map[string]cudaapi.Result{}
	for code, want := range codes {
		b, dev := openSim(t, sim.Config{})
		dev.FailNth(sim.OpMemGetInfo, 1, code)
		_, err := b.Alloc(16)
		e := checkError(t, "Alloc", err)
		assert.Equal(t, code, e.Code)
		assert.Contains(t, e.Fix, want, "%v", code)
		if other, seen := fixes[e.Fix]; seen && want != codes[other] {
			t.Errorf("%v and %v share the Fix %q", code, other, e.Fix)
		}
		fixes[e.Fix] = code
	}
}
