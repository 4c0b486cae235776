package proptest

import "github.com/vyre-go/vyrecuda/core"

// programmaticLaunches is how many steps of a batch a Backend launches with
// programmatic dependent launch on the state machine's device (compute
// capability 9.0, every capability, the option left on): every step that
// follows another step and whose program is a built-in, since the
// built-ins wait on their grid dependencies there. A user program that does
// not declare ProgramSpec.WaitsOnGridDependencies (xorProgram) never is.
func programmaticLaunches(steps []core.Step) uint64 {
	n := uint64(0)
	for i := 1; i < len(steps); i++ {
		switch steps[i].Program {
		case core.ProgramFillU32(), core.ProgramCopyU32(), core.ProgramVAddU32(), core.ProgramScaleF32():
			n++
		}
	}
	return n
}
