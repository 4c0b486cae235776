package core

// idleAfterQuarantine returns how many unfinished uses still hold h, after
// retrying the quarantine when one may be among them: a failed call's
// quarantined work holds the buffers it targets until its stream
// synchronizes, and a dispatcher's Free or Close must not refuse
// an id for work a retry releases (as Backend.Free does not).
func (d *OptimizerDispatcher) idleAfterQuarantine(h Buffer) int64 {
	b := d.b
	n := b.store.inflightUses(h)
	if n > 0 && b.launch.QuarantinedRefs() > 0 {
		b.launch.RetryQuarantine()
		n = b.store.inflightUses(h)
	}
	return n
}
