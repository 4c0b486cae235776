package core

// Capture translates batch to a Batch of the ids' buffers, validating every
// id and range as Run does, and captures it like Backend.Capture into a
// Graph that replays it with one launch and one fence. Every id the batch
// names stays in flight until the Graph is closed: FreeResident refuses it
// with ErrInFlight, and so does the dispatcher's Close. Upload Data slices
// are read at each replay, as with Backend.Capture.
func (d *OptimizerDispatcher) Capture(batch OptBatch) (*Graph, error) {
	const op = "Capture"
	if d == nil {
		return nil, newError(op, KindInvalidArgument, "the optimizer dispatcher is nil",
			"build one with core.NewOptimizerDispatcher")
	}
	bb, h, err := d.resolveBatch(op, &batch)
	if err != nil {
		return nil, err
	}
	// The busy marks cover the window until the Backend has pinned the
	// buffers for the Graph's life.
	defer h.done(false)
	return d.b.Capture(bb)
}
