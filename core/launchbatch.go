package core

// launchPlans queues the Batch's steps on s through drv: through its
// BatchLauncher when it has one, else one Launch per step. It returns the
// index of the step that failed with the driver's error, or len(plans).
func launchPlans(drv Driver, s Stream, plans []launchPlan) (int, error) {
	if bl, ok := drv.(BatchLauncher); ok && len(plans) > 1 {
		ls := make([]Launch, len(plans))
		for i := range plans {
			ls[i] = Launch{F: plans[i].fn, Cfg: plans[i].cfg, Args: plans[i].args}
		}
		markProgrammatic(ls, plans)
		n, err := bl.LaunchBatch(s, ls)
		if err == nil {
			return len(plans), nil
		}
		if n < 0 || n >= len(plans) {
			n = 0 // a driver breaking the contract still gets its error reported
		}
		return n, err
	}
	for i := range plans {
		if err := drv.Launch(plans[i].fn, plans[i].cfg, s, plans[i].args); err != nil {
			return i, err
		}
	}
	return len(plans), nil
}
