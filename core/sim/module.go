package sim

import (
	"bytes"
	"slices"
	"sync/atomic"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

type module struct {
	handle    driver.Module
	image     []byte
	functions map[string]driver.Function
}

type function struct {
	handle driver.Function
	module *module
	name   string
	kernel driver.HostKernel
}

// Launch limits checked at enqueue, as CUDA checks them.
const (
	maxThreadsPerBlock = 1024
	maxBlockZ          = 64
	maxGridX           = 1<<31 - 1
	maxGridYZ          = 65535
)

// ModuleLoad records a copy of any non-empty code image.
func (d *Device) ModuleLoad(image []byte) (driver.Module, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpModuleLoad); done {
		return 0, err
	}
	if len(image) == 0 {
		return 0, fail(OpModuleLoad, cudaapi.CUDA_ERROR_INVALID_IMAGE, "empty image")
	}
	h := driver.Module(d.newHandle())
	d.modules[h] = &module{handle: h, image: slices.Clone(image), functions: make(map[string]driver.Function)}
	return h, nil
}

// ModuleUnload unloads a module; its functions become invalid handles.
// Launches already queued still run the kernel bound when they were queued.
func (d *Device) ModuleUnload(m driver.Module) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpModuleUnload); done {
		return err
	}
	mod, ok := d.modules[m]
	if !ok || m == 0 {
		return fail(OpModuleUnload, cudaapi.CUDA_ERROR_INVALID_HANDLE, "module 0x%x is unknown or unloaded", uintptr(m))
	}
	for _, fh := range mod.functions {
		delete(d.functions, fh)
	}
	delete(d.modules, m)
	return nil
}

// ModuleFunction looks up the entry point name in m: it exists when the
// image declares ".entry name" (PTX), or always with Config.AnyFunction.
// Otherwise it fails with CUDA_ERROR_NOT_FOUND. Looking a name up twice
// gives the same Function.
func (d *Device) ModuleFunction(m driver.Module, name string) (driver.Function, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpModuleFunction); done {
		return 0, err
	}
	mod, ok := d.modules[m]
	if !ok || m == 0 {
		return 0, fail(OpModuleFunction, cudaapi.CUDA_ERROR_INVALID_HANDLE, "module 0x%x is unknown or unloaded", uintptr(m))
	}
	if fh, ok := mod.functions[name]; ok {
		return fh, nil
	}
	if name == "" || (!d.cfg.AnyFunction && !declaresEntry(mod.image, name)) {
		return 0, fail(OpModuleFunction, cudaapi.CUDA_ERROR_NOT_FOUND,
			"module 0x%x declares no entry %q", uintptr(m), name)
	}
	fh := driver.Function(d.newHandle())
	mod.functions[name] = fh
	d.functions[fh] = &function{handle: fh, module: mod, name: name}
	return fh, nil
}

// declaresEntry reports whether a PTX image contains ".entry name" followed
// by something that cannot continue an identifier.
func declaresEntry(image []byte, name string) bool {
	const kw = ".entry"
	rest := image
	for {
		i := bytes.Index(rest, []byte(kw))
		if i < 0 {
			return false
		}
		rest = rest[i+len(kw):]
		id := bytes.TrimLeft(rest, " \t\r\n")
		if len(id) == len(rest) {
			continue // ".entryfoo" is not the directive
		}
		if bytes.HasPrefix(id, []byte(name)) && (len(id) == len(name) || !isIdentByte(id[len(name)])) {
			return true
		}
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// BindHostKernel attaches the Go function k to f: launches of f run k when
// they execute. Binding again replaces the kernel for later launches.
func (d *Device) BindHostKernel(f driver.Function, k driver.HostKernel) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpBindHostKernel); done {
		return err
	}
	fn, ok := d.functions[f]
	if !ok || f == 0 {
		return fail(OpBindHostKernel, cudaapi.CUDA_ERROR_INVALID_HANDLE, "function 0x%x is unknown or its module was unloaded", uintptr(f))
	}
	if k == nil {
		return fail(OpBindHostKernel, cudaapi.CUDA_ERROR_INVALID_VALUE, "nil kernel")
	}
	fn.kernel = k
	return nil
}

func checkLaunch(cfg driver.LaunchConfig) error {
	g, b := cfg.Grid, cfg.Block
	for i := range 3 {
		if g[i] == 0 || b[i] == 0 {
			return fail(OpLaunch, cudaapi.CUDA_ERROR_INVALID_VALUE, "zero dimension in grid %v block %v", g, b)
		}
	}
	if g[0] > maxGridX || g[1] > maxGridYZ || g[2] > maxGridYZ {
		return fail(OpLaunch, cudaapi.CUDA_ERROR_INVALID_VALUE, "grid %v exceeds the maximum [%d %d %d]", g, maxGridX, maxGridYZ, maxGridYZ)
	}
	if threads := uint64(b[0]) * uint64(b[1]) * uint64(b[2]); threads > maxThreadsPerBlock || b[2] > maxBlockZ {
		return fail(OpLaunch, cudaapi.CUDA_ERROR_INVALID_VALUE, "block %v has %d threads; the limit is %d (z <= %d)", b, threads, maxThreadsPerBlock, maxBlockZ)
	}
	if cfg.SharedMem > maxSharedMemPerBlock {
		return fail(OpLaunch, cudaapi.CUDA_ERROR_INVALID_VALUE, "%d bytes of shared memory; the limit is %d", cfg.SharedMem, maxSharedMemPerBlock)
	}
	return nil
}

// Launch queues f on s. The bound host kernel runs when the launch executes,
// with a view of device memory; a function with no bound kernel fails here
// with CUDA_ERROR_NOT_SUPPORTED. A kernel that returns an error or panics
// makes the next synchronization or query of s fail with
// CUDA_ERROR_LAUNCH_FAILED.
func (d *Device) Launch(f driver.Function, cfg driver.LaunchConfig, s driver.Stream, args []driver.KernelArg) error {
	return d.launch(false, f, cfg, s, args)
}

// launch is Launch. With programmatic set it is first counted, and open
// to faults, as OpLaunchProgrammatic, then, like every launch, as OpLaunch.
func (d *Device) launch(programmatic bool, f driver.Function, cfg driver.LaunchConfig, s driver.Stream, args []driver.KernelArg) error {
	const o = OpLaunch
	d.mu.Lock()
	defer d.mu.Unlock()
	if programmatic {
		if done, err := d.admit(OpLaunchProgrammatic); done {
			return err
		}
	}
	if done, err := d.admit(o); done {
		return err
	}
	fn, ok := d.functions[f]
	if !ok || f == 0 {
		return fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "function 0x%x is unknown or its module was unloaded", uintptr(f))
	}
	st, err := d.lookupStream(o, s)
	if err != nil {
		return err
	}
	if fn.kernel == nil {
		return fail(o, cudaapi.CUDA_ERROR_NOT_SUPPORTED,
			"function %q has no host kernel; the simulated device runs only kernels attached with BindHostKernel", fn.name)
	}
	if err := checkLaunch(cfg); err != nil {
		return err
	}
	kernel, name, args := fn.kernel, fn.name, slices.Clone(args)
	d.enqueue(st, &op{kind: o, cost: LaunchOverhead, run: func(d *Device) *Error {
		return d.runKernel(name, kernel, cfg, args)
	}})
	return nil
}

// runKernel runs a host kernel with d.mu held, turning errors and panics
// into CUDA_ERROR_LAUNCH_FAILED.
func (d *Device) runKernel(name string, k driver.HostKernel, cfg driver.LaunchConfig, args []driver.KernelArg) (err *Error) {
	mem := &kernelMemory{d: d}
	mem.live.Store(true)
	defer func() {
		mem.live.Store(false)
		if r := recover(); r != nil {
			err = fail(OpLaunch, cudaapi.CUDA_ERROR_LAUNCH_FAILED, "kernel %q panicked: %v", name, r)
		}
	}()
	if kerr := k(mem, cfg, args); kerr != nil {
		return fail(OpLaunch, cudaapi.CUDA_ERROR_LAUNCH_FAILED, "kernel %q: %v", name, kerr)
	}
	return nil
}

// kernelMemory is the driver.KernelMemory a host kernel sees. It is valid only
// while the kernel runs (the device lock is held by the launch's executor).
type kernelMemory struct {
	d    *Device
	live atomic.Bool
}

// Bytes returns the n bytes of device memory at ptr, aliasing the
// allocation, when they lie inside one live allocation; with
// Capabilities.MappedPinnedHost, also the n bytes of pinned host memory at
// host address ptr when they lie inside one live HostAlloc block (unified
// addressing).
func (m *kernelMemory) Bytes(ptr uint64, n int) ([]byte, error) {
	if !m.live.Load() {
		return nil, fail(OpLaunch, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, "KernelMemory used after its kernel returned")
	}
	if n < 0 {
		return nil, fail(OpLaunch, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, "negative length %d", n)
	}
	b, ok := m.d.deviceRange(ptr, uint64(n))
	if !ok {
		if hb, ok := m.d.mappedHost(ptr, n); ok {
			if err := m.d.checkHostCached(OpLaunch, "kernel access", hb); err != nil {
				return nil, err
			}
			return hb, nil
		}
		return nil, fail(OpLaunch, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, "kernel access %s", m.d.rangeDetail(ptr, uint64(n)))
	}
	if err := m.d.checkCached(OpLaunch, "kernel access", ptr, uint64(n)); err != nil {
		return nil, err
	}
	return b, nil
}
