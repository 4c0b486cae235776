package core

// Dispatch launches p over bufs (in the program's order) with cfg and waits
// for it with one fence: Run of a one-step Batch. Every argument is checked
// before anything is queued, and the bound buffers stay in flight (Free
// refuses them) until the launch has completed. cfg.Timing has no effect
// here, since there is no Pending to report it; use DispatchAsync.
func (b *Backend) Dispatch(p *Program, bufs []Buffer, cfg DispatchConfig) error {
	return b.dispatch("Dispatch", p, bufs, cfg)
}

// dispatch is Dispatch under op.
func (b *Backend) dispatch(op string, p *Program, bufs []Buffer, cfg DispatchConfig) error {
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	cfg.Timing = false
	w, err := b.enqueue(op, &Batch{Steps: []Step{{Program: p, Bufs: bufs, Config: cfg}}}, false, nil, nil)
	if err != nil {
		return err
	}
	return w.close(op)
}

// DispatchAsync checks and queues a launch of p over bufs like Dispatch and
// returns without waiting. The bound buffers stay in flight (Free refuses
// them) until the returned Pending completes; collect it with Await or
// Close. With cfg.Timing set, Pending.DeviceTime reports the launch's
// device time.
func (b *Backend) DispatchAsync(p *Program, bufs []Buffer, cfg DispatchConfig) (*Pending, error) {
	return b.dispatchAsync("DispatchAsync", p, bufs, cfg)
}

// dispatchAsync is DispatchAsync under op.
func (b *Backend) dispatchAsync(op string, p *Program, bufs []Buffer, cfg DispatchConfig) (*Pending, error) {
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &Batch{Steps: []Step{{Program: p, Bufs: bufs, Config: cfg}}}, true, nil, nil)
	if err != nil {
		return nil, err
	}
	return newPending(w), nil
}
