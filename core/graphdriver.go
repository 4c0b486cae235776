package core

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// graphEntryPoints names the driver entry points GraphDriver stands for.
const graphEntryPoints = "cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags, cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy"

// graphDriver returns the driver's GraphDriver, or an ErrUnsupported naming
// what is missing.
func (b *Backend) graphDriver(op string) (GraphDriver, error) {
	gd, ok := b.drv.(GraphDriver)
	if !ok {
		return nil, newError(op, KindUnsupported,
			fmt.Sprintf("the driver (%T) does not implement core.GraphDriver (%s)", b.drv, graphEntryPoints),
			"use Run, or a driver with graph support (core.OpenCUDA's, or core/sim's)")
	}
	if cr, ok := b.drv.(CapabilityReporter); ok {
		if c := cr.Capabilities(); !c.Graphs {
			return nil, newError(op, KindUnsupported,
				fmt.Sprintf("the driver (%s) does not offer graphs (%s)", c, graphEntryPoints),
				"use Run, or update the NVIDIA driver to one with CUDA graphs (CUDA 11.4 or newer)")
		}
	}
	return gd, nil
}

// graphError wraps a failed graph call: a driver without the entry point
// is ErrUnsupported naming it, anything else ErrDriver.
func graphError(op, call string, err error) *Error { return errs.Graph(op, call, err) }
