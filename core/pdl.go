package core

import (
	"bytes"
	"fmt"
)

// Programmatic dependent launch (PDL). On devices of compute capability 9.0
// and newer, a kernel launched with programmatic stream serialization may be
// scheduled while the kernel ahead of it on its stream is still running; it
// must then execute griddepcontrol.wait (cudaGridDependencySynchronize)
// before it touches memory, which returns once the earlier grid has
// completed and its writes are visible. The earlier kernel lets it start
// with griddepcontrol.launch_dependents (or by exiting). A chain of tiny
// dependent launches then overlaps each launch's scheduling with the
// previous kernel's run; a stream capture keeps the relation as
// programmatic graph edges (CUDA 12.3 drivers and newer), so graph replays
// gain the same.
//
// A Backend uses it when the option allows (WithProgrammaticLaunch, on by
// default), the driver offers it (Capabilities.ProgrammaticLaunch), the
// device is of compute capability 9.0 or newer, and the driver queues
// launches in batches (BatchLauncher). Then the built-in programs load
// their sm_90 images (core/kernels), which wait on their grid dependencies,
// and a step of a Run or Capture whose program waits on them
// (ProgramSpec.WaitsOnGridDependencies, or a built-in) and which directly
// follows another step's launch on the stream is queued with
// Launch.Programmatic set. Everything else is launched as before: a kernel
// that does not wait could read its inputs before the earlier kernel has
// written them.

// WithProgrammaticLaunch turns programmatic dependent launch on or off (it
// is on by default, and used where the device and driver support it: see
// Backend.ProgrammaticLaunch). Off, every kernel is launched with
// cuLaunchKernel and the built-in programs load their portable images: use
// it to compare timings, or to rule programmatic launches out while
// debugging a kernel marked ProgramSpec.WaitsOnGridDependencies.
func WithProgrammaticLaunch(on bool) Option {
	return func(c *config) { c.noPDL = !on }
}

// ProgrammaticLaunch reports whether the Backend launches dependent steps of
// a Run or Capture with programmatic dependent launch: the option allows it
// (WithProgrammaticLaunch), the driver offers it
// (Capabilities.ProgrammaticLaunch) and queues launches in batches
// (BatchLauncher), and the device is of compute capability 9.0 or newer.
// False for a nil Backend.
func (b *Backend) ProgrammaticLaunch() bool {
	return b != nil && b.pdl
}

// usePDL decides, once at Open, whether a Backend over drv uses
// programmatic dependent launch.
func usePDL(drv Driver, info DeviceInfo, cfg config) bool {
	if cfg.noPDL || info.CCMajor < pdlMinCCMajor {
		return false
	}
	if _, ok := drv.(BatchLauncher); !ok {
		return false
	}
	cr, ok := drv.(CapabilityReporter)
	return ok && cr.Capabilities().ProgrammaticLaunch
}

// image returns the Program whose image a Backend loads for p: its sm_90
// variant when the Backend uses programmatic dependent launch (pdl) and p
// has one, else p.
func (p *Program) image(pdl bool) *Program {
	if pdl && p.sm90 != nil {
		return p.sm90
	}
	return p
}

// waitsOnGrid reports whether launches of p may be programmatic on a
// Backend that uses programmatic dependent launch or not (pdl): it does and
// the image it loads for p waits on its grid dependencies.
func (p *Program) waitsOnGrid(pdl bool) bool {
	return pdl && p.image(pdl).spec.WaitsOnGridDependencies
}

// markProgrammatic sets Programmatic on every launch of ls that directly
// follows another launch in ls and whose step waits on its grid
// dependencies (plans[i].waits). The first launch never is: what precedes
// it on the stream is not known to be a kernel.
func markProgrammatic(ls []Launch, plans []launchPlan) {
	for i := 1; i < len(ls); i++ {
		ls[i].Programmatic = plans[i].waits
	}
}

// checkGridWait refuses a spec marked WaitsOnGridDependencies whose image
// is PTX text without a griddepcontrol.wait instruction: launched
// programmatically, such a kernel could read its inputs before the kernel
// ahead of it has written them. Binary images (cubin, fatbin) pass
// unchecked.
func checkGridWait(op string, spec *ProgramSpec) error {
	im := spec.Image
	if !spec.WaitsOnGridDependencies || bytes.HasPrefix(im, []byte("\x7fELF")) || bytes.IndexByte(im, 0) >= 0 {
		return nil
	}
	if bytes.Contains(im, []byte("griddepcontrol.wait")) {
		return nil
	}
	name := spec.Name
	if name == "" {
		name = spec.Entry
	}
	return newError(op, KindInvalidArgument,
		fmt.Sprintf("program %q is marked WaitsOnGridDependencies, but its PTX (%d bytes) has no griddepcontrol.wait", name, len(im)),
		"call cudaGridDependencySynchronize() in the kernel before its first global memory access and build it for compute_90, or leave WaitsOnGridDependencies false")
}
