package core

import "fmt"

// queueSteps queues pl's steps on s in order: each run of kernel steps
// through launchPlans, each collective step through its Comm. On failure
// the steps before the failing one are queued.
func (b *Backend) queueSteps(op string, s Stream, pl *batchPlan) *Error {
	plans := pl.plans
	for lo := 0; lo < len(plans); {
		if cp := plans[lo].coll; cp != nil {
			if err := cp.queue(op, pl, lo, s); err != nil {
				return err
			}
			lo++
			continue
		}
		hi := lo + 1
		for hi < len(plans) && plans[hi].coll == nil {
			hi++
		}
		if i, err := launchPlans(b.drv, s, plans[lo:hi]); err != nil {
			i += lo
			e := driverError(op, "Launch", err)
			e.Detail = fmt.Sprintf("step %d (program %q): %s", i, pl.batch.Steps[i].Program.spec.Name, e.Detail)
			return e
		}
		lo = hi
	}
	return nil
}

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
