package spin

// CPUPause executes the x86 PAUSE instruction: a spin-wait hint that gives
// the core's other hardware thread the execution resources a polling loop
// would take, and spares the pipeline flush a loop of bare loads causes
// when the polled value changes.
func CPUPause()
