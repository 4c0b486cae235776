package core

// DispatchResident launches p over bufs (in the program's order) with cfg
// and waits for it with one fence. It is Run of a one-step Batch: every
// argument is validated before anything is queued, and the bound buffers
// stay in flight until the launch has completed. cfg.Timing has no effect
// here (there is no Pending to report it); use DispatchResidentAsync.
func (b *Backend) DispatchResident(p *Program, bufs []Buffer, cfg DispatchConfig) error {
	const op = "DispatchResident"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	cfg.Timing = false
	w, err := b.enqueue(op, &Batch{Steps: []Step{{Program: p, Bufs: bufs, Config: cfg}}}, false)
	if err != nil {
		return err
	}
	return w.close(op)
}

// DispatchResidentAsync validates and queues a launch of p over bufs like
// DispatchResident and returns without waiting. The bound buffers stay in
// flight (FreeResident refuses them) until the returned Pending completes;
// with cfg.Timing set, Pending.DeviceTime reports the launch's device time.
func (b *Backend) DispatchResidentAsync(p *Program, bufs []Buffer, cfg DispatchConfig) (*Pending, error) {
	const op = "DispatchResidentAsync"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &Batch{Steps: []Step{{Program: p, Bufs: bufs, Config: cfg}}}, true)
	if err != nil {
		return nil, err
	}
	return newPending(w), nil
}
