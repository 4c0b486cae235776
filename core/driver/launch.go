package driver

// Launch is one kernel launch of a batch handed to a BatchLauncher.
type Launch struct {
	F    Function
	Cfg  LaunchConfig
	Args []KernelArg
	// Programmatic asks for programmatic dependent launch: the kernel may
	// be scheduled before the launch ahead of it on the stream has finished
	// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), because it
	// waits on its grid dependencies before touching memory. A driver that
	// cannot launch so queues it as an ordinary launch, which computes the
	// same. The Backend sets it only on a launch that directly follows
	// another launch of the same batch.
	Programmatic bool
}

// BatchLauncher is an optional Driver capability, found by type assertion: a
// driver that queues many launches on one stream in one call, so a Batch of
// tiny steps does not pay the per-call overhead of Launch for each. The real
// driver makes one context switch and one crossing into C for the whole list.
type BatchLauncher interface {
	// LaunchBatch queues ls in order on s, as Launch would one by one. It
	// returns len(ls) and nil when all were queued. On failure it returns the
	// index of the launch that failed and an error carrying its
	// cudaapi.Result: nothing after that launch was queued, launches before
	// it may have been, so the caller drains s before reusing what they use.
	LaunchBatch(s Stream, ls []Launch) (int, error)
}
