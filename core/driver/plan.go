package driver

// PlanProcsReporter is an optional Driver capability, found by type
// assertion: a driver whose Backend should plan its transfers as on a host
// running PlanProcs goroutines in parallel, whatever runtime.GOMAXPROCS
// is. The plan decides how many chunks, parts and copies a transfer makes,
// so a driver that reports a fixed count sees the same calls from the same
// program on every machine (the simulated device does, so a fault armed at
// the nth copy hits the same copy everywhere). A count below 1 is ignored.
type PlanProcsReporter interface {
	PlanProcs() int
}
