package sim

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

const testPTX = `
.version 8.0
.target sm_90
.visible .entry add_one(
	.param .u64 p, .param .u32 n
)
{ ret; }
.visible .entry	fill_u8 ( .param .u64 p ) { ret; }
// .entry in a comment still declares nothing useful, but is harmless
.entryfake
`

var one = driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}

// addOne adds 1 to each of n bytes at args[0].
func addOne(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
	b, err := mem.Bytes(args[0].Ptr, int(args[1].U32))
	if err != nil {
		return err
	}
	for i := range b {
		b[i]++
	}
	return nil
}

func TestModuleFunctionLookup(t *testing.T) {
	d := New(Config{})
	_, err := d.ModuleLoad(nil)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_IMAGE, err)
	image := []byte(testPTX)
	m, err := d.ModuleLoad(image)
	require.NoError(t, err)
	require.NotZero(t, m)
	image[0] = 'X' // the device keeps its own copy

	for _, name := range []string{"add_one", "fill_u8"} {
		f, err := d.ModuleFunction(m, name)
		require.NoError(t, err, name)
		require.NotZero(t, f)
		again, err := d.ModuleFunction(m, name)
		require.NoError(t, err)
		require.Equal(t, f, again, "a name resolves to one Function")
	}
	for _, name := range []string{"", "add", "add_one_", "fake", "entryfake", "ret"} {
		_, err := d.ModuleFunction(m, name)
		requireCode(t, cudaapi.CUDA_ERROR_NOT_FOUND, err)
	}
	_, err = d.ModuleFunction(0, "add_one")
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, err)

	f, err := d.ModuleFunction(m, "add_one")
	require.NoError(t, err)
	require.NoError(t, d.ModuleUnload(m))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.ModuleUnload(m))
	_, err = d.ModuleFunction(m, "add_one")
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, err)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.BindHostKernel(f, addOne))

	anyDev := New(Config{AnyFunction: true})
	am, err := anyDev.ModuleLoad([]byte{0x7f, 'E', 'L', 'F'})
	require.NoError(t, err)
	_, err = anyDev.ModuleFunction(am, "whatever")
	require.NoError(t, err)
	require.NoError(t, anyDev.ModuleUnload(am))
	RequireNoLeaks(t, anyDev)
	RequireNoLeaks(t, d)
}

func TestLaunchRunsHostKernelLazily(t *testing.T) {
	r := newRig(t, 16)
	m, err := r.d.ModuleLoad([]byte(testPTX))
	require.NoError(t, err)
	f, err := r.d.ModuleFunction(m, "add_one")
	require.NoError(t, err)
	args := []driver.KernelArg{{Ptr: r.p, IsPtr: true}, {U32: 16}}

	requireCode(t, cudaapi.CUDA_ERROR_NOT_SUPPORTED, r.d.Launch(f, one, r.s, args))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, r.d.BindHostKernel(f, nil))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, r.d.BindHostKernel(0, addOne))
	require.NoError(t, r.d.BindHostKernel(f, addOne))

	require.NoError(t, r.d.Launch(f, one, r.s, args))
	args[1].U32 = 1 // the launch copied its arguments
	require.NoError(t, r.d.Launch(f, one, r.s, args))
	require.Equal(t, fill(16, 0), r.device(t), "the kernel runs at execution, not at launch")
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, append([]byte{2}, fill(15, 1)...), r.device(t))

	bad := []struct {
		name string
		f    driver.Function
		cfg  driver.LaunchConfig
		s    driver.Stream
		code cudaapi.Result
	}{
		{"null function", 0, one, r.s, cudaapi.CUDA_ERROR_INVALID_HANDLE},
		{"null stream", f, one, 0, cudaapi.CUDA_ERROR_INVALID_HANDLE},
		{"zero grid", f, driver.LaunchConfig{Block: one.Block}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"zero block", f, driver.LaunchConfig{Grid: one.Grid}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"block too big", f, driver.LaunchConfig{Grid: one.Grid, Block: [3]uint32{1024, 2, 1}}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"block z too big", f, driver.LaunchConfig{Grid: one.Grid, Block: [3]uint32{1, 1, 65}}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"grid y too big", f, driver.LaunchConfig{Grid: [3]uint32{1, 65536, 1}, Block: one.Block}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"shared memory", f, driver.LaunchConfig{Grid: one.Grid, Block: one.Block, SharedMem: 1 << 20}, r.s, cudaapi.CUDA_ERROR_INVALID_VALUE},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := r.d.Live()
			requireCode(t, tt.code, r.d.Launch(tt.f, tt.cfg, tt.s, args))
			require.Equal(t, before, r.d.Live())
		})
	}
	require.NoError(t, r.d.Launch(f, driver.LaunchConfig{Grid: [3]uint32{maxGridX, 65535, 65535}, Block: [3]uint32{1024, 1, 1}}, r.s, args))

	// Unloading the module keeps already queued launches runnable.
	require.NoError(t, r.d.ModuleUnload(m))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, r.d.Launch(f, one, r.s, args))
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, append([]byte{3}, fill(15, 1)...), r.device(t))
	r.close(t)
}

func TestKernelFailuresSurfaceAtSync(t *testing.T) {
	var escaped driver.KernelMemory
	kernels := map[string]driver.HostKernel{
		"error": func(driver.KernelMemory, driver.LaunchConfig, []driver.KernelArg) error {
			return errors.New("boom")
		},
		"panic": func(driver.KernelMemory, driver.LaunchConfig, []driver.KernelArg) error {
			var args []driver.KernelArg
			_ = args[3] // index out of range
			return nil
		},
		"out of bounds": func(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
			_, err := mem.Bytes(args[0].Ptr, 17)
			return err
		},
		"negative": func(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
			_, err := mem.Bytes(args[0].Ptr, -1)
			return err
		},
		"escapes": func(mem driver.KernelMemory, _ driver.LaunchConfig, _ []driver.KernelArg) error {
			escaped = mem
			return nil
		},
	}
	for name, k := range kernels {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 16)
			m, err := r.d.ModuleLoad([]byte(testPTX))
			require.NoError(t, err)
			f, err := r.d.ModuleFunction(m, "fill_u8")
			require.NoError(t, err)
			require.NoError(t, r.d.BindHostKernel(f, k))
			e := mustEvent(t, r.d, false)
			require.NoError(t, r.d.Launch(f, one, r.s, []driver.KernelArg{{Ptr: r.p, IsPtr: true}}))
			require.NoError(t, r.d.EventRecord(e, r.s))
			if name == "escapes" {
				require.NoError(t, r.d.StreamSynchronize(r.s))
				_, err := escaped.Bytes(r.p, 1)
				requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, err)
			} else {
				requireCode(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, r.d.StreamSynchronize(r.s))
				require.NoError(t, r.d.StreamSynchronize(r.s), "reported once, then the stream is usable")
				done, err := r.d.EventQuery(e)
				require.NoError(t, err)
				require.True(t, done)
			}
			require.NoError(t, r.d.EventDestroy(e))
			require.NoError(t, r.d.ModuleUnload(m))
			r.close(t)
		})
	}
}

func TestKernelSeesLaunchGeometry(t *testing.T) {
	r := newRig(t, 8)
	m, err := r.d.ModuleLoad([]byte(testPTX))
	require.NoError(t, err)
	f, err := r.d.ModuleFunction(m, "fill_u8")
	require.NoError(t, err)
	require.NoError(t, r.d.BindHostKernel(f, func(mem driver.KernelMemory, cfg driver.LaunchConfig, args []driver.KernelArg) error {
		b, err := mem.Bytes(args[0].Ptr, 8)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(b, cfg.Grid[0]*cfg.Block[0])
		binary.LittleEndian.PutUint32(b[4:], cfg.SharedMem)
		return nil
	}))
	cfg := driver.LaunchConfig{Grid: [3]uint32{3, 1, 1}, Block: [3]uint32{128, 1, 1}, SharedMem: 512}
	require.NoError(t, r.d.Launch(f, cfg, r.s, []driver.KernelArg{{Ptr: r.p, IsPtr: true}}))
	require.NoError(t, r.d.StreamSynchronize(r.s))
	got := r.device(t)
	require.Equal(t, uint32(384), binary.LittleEndian.Uint32(got))
	require.Equal(t, uint32(512), binary.LittleEndian.Uint32(got[4:]))
	require.NoError(t, r.d.ModuleUnload(m))
	r.close(t)
}

// copyIn copies n bytes from args[1] to args[0]: a kernel that reads
// whatever memory args[1] names.
func copyIn(mem driver.KernelMemory, _ driver.LaunchConfig, args []driver.KernelArg) error {
	src, err := mem.Bytes(args[1].Ptr, int(args[2].U32))
	if err != nil {
		return err
	}
	dst, err := mem.Bytes(args[0].Ptr, int(args[2].U32))
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

// TestKernelsReadMappedPinnedHost: a device with MappedPinnedHost lets
// kernels read memory from HostAlloc at its host address, as it is when the
// kernel runs; anywhere else (past the block, after HostFree, inside a
// block returned to a staging cache under PoisonCache, or on a device
// without the capability) the access fails the launch with an illegal
// address at the next synchronization.
func TestKernelsReadMappedPinnedHost(t *testing.T) {
	noMap := DefaultCapabilities()
	noMap.MappedPinnedHost = false
	run := func(t *testing.T, cfg Config, setup func(d *Device, host []byte) (src uint64, n int)) ([]byte, error) {
		d := New(cfg)
		m, err := d.ModuleLoad([]byte(testPTX))
		require.NoError(t, err)
		f, err := d.ModuleFunction(m, "add_one")
		require.NoError(t, err)
		require.NoError(t, d.BindHostKernel(f, copyIn))
		p := mustAlloc(t, d, 64)
		host := mustPinned(t, d, 64)
		for i := range host {
			host[i] = byte(i + 1)
		}
		s := mustStream(t, d)
		src, n := setup(d, host)
		require.NoError(t, d.Launch(f, one, s, []driver.KernelArg{{Ptr: p, IsPtr: true}, {Ptr: src, IsPtr: true}, {U32: uint32(n)}}))
		host[1] = 0xEE // the kernel reads the memory as it is when it runs
		err = d.StreamSynchronize(s)
		got, rerr := d.ReadDevice(p, n)
		require.NoError(t, rerr)
		return got, err
	}
	at := func(host []byte, off int) uint64 { return uint64(uintptr(ptrOf(host)) + uintptr(off)) }

	got, err := run(t, Config{TotalMemory: 1 << 20}, func(_ *Device, host []byte) (uint64, int) { return at(host, 0), 64 })
	require.NoError(t, err)
	want := make([]byte, 64)
	for i := range want {
		want[i] = byte(i + 1)
	}
	want[1] = 0xEE
	require.Equal(t, want, got)

	bad := map[string]struct {
		cfg   Config
		setup func(d *Device, host []byte) (uint64, int)
	}{
		"without the capability": {Config{TotalMemory: 1 << 20, Capabilities: &noMap},
			func(_ *Device, host []byte) (uint64, int) { return at(host, 0), 64 }},
		"past the block": {Config{TotalMemory: 1 << 20},
			func(_ *Device, host []byte) (uint64, int) { return at(host, 8), 64 }},
		"after HostFree": {Config{TotalMemory: 1 << 20},
			func(d *Device, host []byte) (uint64, int) {
				require.NoError(t, d.HostFree(ptrOf(host)))
				return at(host, 0), 64
			}},
		"inside a cached block": {Config{TotalMemory: 1 << 20, PoisonCache: true},
			func(d *Device, host []byte) (uint64, int) { d.HostCached(host); return at(host, 0), 64 }},
	}
	for name, tt := range bad {
		t.Run(name, func(t *testing.T) {
			got, err := run(t, tt.cfg, tt.setup)
			requireCode(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, err)
			require.Contains(t, err.Error(), "ILLEGAL_ADDRESS")
			require.Equal(t, make([]byte, len(got)), got, "nothing was copied")
		})
	}
}
