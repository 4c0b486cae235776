package main

import (
	"errors"
	"math"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
)

// prepareW8Floor builds W8's floor on f: the step done with the driver
// alone, no library logic between the calls. The kernel's image (compiled
// by Backend.Compile) is loaded into a module of its own; each step queues
// the DMA of the input from page-locked memory, the launch and the DMA of
// the output into page-locked memory on one stream and synchronizes it once.
// On the simulated device the same calls go through its seam, with the
// kernel's Go twin bound to the function.
func prepareW8Floor(f *w8Fixture, drv core.Driver) (body w8Body, err error) {
	var undo []func() error
	cleanup := func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, cleanup())
		}
	}()
	xp, err := f.b.ResidentDevicePtr(f.x)
	if err != nil {
		return w8Body{}, err
	}
	yp, err := f.b.ResidentDevicePtr(f.y)
	if err != nil {
		return w8Body{}, err
	}
	spec := f.prog.Spec()
	fn, err := loadW8Function(drv, spec, &undo)
	if err != nil {
		return w8Body{}, err
	}
	in, err := hostAllocUndo(drv, f.n, &undo)
	if err != nil {
		return w8Body{}, err
	}
	out, err := hostAllocUndo(drv, f.n, &undo)
	if err != nil {
		return w8Body{}, err
	}
	fillW8Input(in)
	st, err := drv.StreamCreate()
	if err != nil {
		return w8Body{}, err
	}
	// A failed step can leave copies queued: they finish before the stream
	// goes and the page-locked memory they use is freed.
	undo = append(undo, func() error { return errors.Join(drv.StreamSynchronize(st), drv.StreamDestroy(st)) })

	words := uint32(f.n / 4)
	lc := core.LaunchConfig{Grid: [3]uint32{w8Blocks(spec, words), 1, 1}, Block: [3]uint32{spec.Block, 1, 1}}
	args := []core.KernelArg{
		{Ptr: yp, IsPtr: true, Type: core.ParamBuffer},
		{Ptr: xp, IsPtr: true, Type: core.ParamBuffer},
		{Type: core.ParamFloat32, Bits: uint64(math.Float32bits(w8Scale)), U32: math.Float32bits(w8Scale)},
		{Type: core.ParamFloat32, Bits: uint64(math.Float32bits(w8Shift)), U32: math.Float32bits(w8Shift)},
		{Type: core.ParamUint32, Bits: uint64(words), U32: words},
	}
	step := func() error {
		f.touch(in)
		if err := drv.MemcpyHtoDAsync(xp, in, st); err != nil {
			return err
		}
		if err := drv.Launch(fn, lc, st, args); err != nil {
			return err
		}
		if err := drv.MemcpyDtoHAsync(out, yp, st); err != nil {
			return err
		}
		return drv.StreamSynchronize(st)
	}
	return w8Body{step: step, in: in, out: func() []byte { return out }, close: cleanup}, nil
}

// loadW8Function loads spec's image and looks up its entry, binding the Go
// twin where the driver runs twins; the unload goes onto undo.
func loadW8Function(drv core.Driver, spec core.ProgramSpec, undo *[]func() error) (core.Function, error) {
	m, err := drv.ModuleLoad(spec.Image)
	if err != nil {
		return 0, err
	}
	*undo = append(*undo, func() error { return drv.ModuleUnload(m) })
	fn, err := drv.ModuleFunction(m, spec.Entry)
	if err != nil {
		return 0, err
	}
	if hb, ok := drv.(core.HostKernelBinder); ok {
		if err := hb.BindHostKernel(fn, spec.Host); err != nil {
			return 0, err
		}
	}
	return fn, nil
}

// hostAllocUndo allocates n bytes of page-locked memory from drv and puts
// its free onto undo.
func hostAllocUndo(drv core.Driver, n int, undo *[]func() error) ([]byte, error) {
	h, err := drv.HostAlloc(uint64(n))
	if err != nil {
		return nil, err
	}
	*undo = append(*undo, func() error { return drv.HostFree(unsafe.Pointer(unsafe.SliceData(h))) })
	return h[:n], nil
}

// w8Blocks is the grid the Program's rule derives for words elements: one
// thread each, at most the rule's cap (the kernel loops past it).
func w8Blocks(spec core.ProgramSpec, words uint32) uint32 {
	capBlocks := spec.Grid.MaxBlocks
	if capBlocks == 0 {
		capBlocks = core.DefaultMaxBlocks
	}
	blocks := (uint64(words) + uint64(spec.Block) - 1) / uint64(spec.Block)
	return uint32(max(1, min(blocks, uint64(capBlocks))))
}
