package core

import "log/slog"

// Default pool caps and limits used when no Option overrides them.
const (
	// DefaultDevicePoolCap is the most bytes of freed device allocations the
	// device pool keeps for reuse.
	DefaultDevicePoolCap uint64 = 256 << 20
	// DefaultPinnedPoolCap is the most bytes of pinned host staging blocks the
	// pinned pool keeps for reuse.
	DefaultPinnedPoolCap uint64 = 256 << 20
	// DefaultResidentPoolLimit is the largest resident buffer served from the
	// device pool. Pooled buffers occupy a power-of-two bucket, so larger ones
	// are allocated at their exact size instead of wasting up to half of it.
	DefaultResidentPoolLimit = 1 << 20
)

// Option configures a Backend in Open.
type Option func(*config)

// config is what the Options set; Open fills in the defaults first.
type config struct {
	devicePoolCap     uint64
	pinnedPoolCap     uint64
	residentPoolLimit int
	log               *slog.Logger
	xfer              transferTuning // zero: defaults (xfer.go)
}

func defaultConfig() config {
	return config{
		devicePoolCap:     DefaultDevicePoolCap,
		pinnedPoolCap:     DefaultPinnedPoolCap,
		residentPoolLimit: DefaultResidentPoolLimit,
		log:               slog.Default(),
	}
}

// WithDevicePoolCap sets the most bytes of freed device allocations kept for
// reuse. Zero caches nothing: every freed allocation goes straight back to
// the driver, as with the optimizer dispatcher's caps. Each bucket size also
// keeps at most cap/size allocations (at least 1, at most 1024).
func WithDevicePoolCap(bytes uint64) Option {
	return func(c *config) { c.devicePoolCap = bytes }
}

// WithPinnedPoolCap sets the most bytes of pinned host staging memory kept for
// reuse between transfers. Zero caches nothing: every transfer allocates its
// staging and frees it afterwards.
func WithPinnedPoolCap(bytes uint64) Option {
	return func(c *config) { c.pinnedPoolCap = bytes }
}

// WithResidentPoolLimit sets the largest resident buffer, in bytes, that
// AllocateResident takes from the device pool; larger buffers are allocated
// at their exact size. Zero or a negative value sends every resident
// allocation straight to the driver.
func WithResidentPoolLimit(bytes int) Option {
	return func(c *config) { c.residentPoolLimit = bytes }
}

// WithLogger sets where the Backend reports repairs it makes to its own
// accounting and release failures it cannot return to a caller. A nil logger
// means slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.Default()
		}
		c.log = l
	}
}
