package core

import (
	"log/slog"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/nvrtc"
)

// Floors of the cache caps and limits that scale with device memory; the
// rules are DeviceCacheCap, PinnedCacheCap and ResidentClassLimit.
const (
	// DefaultDevicePoolCap is the smallest default cap on cached device
	// bytes (see DeviceCacheCap).
	DefaultDevicePoolCap uint64 = 256 << 20
	// DefaultPinnedPoolCap is the smallest default cap on cached pinned host
	// staging bytes (see PinnedCacheCap).
	DefaultPinnedPoolCap uint64 = 256 << 20
	// DefaultResidentPoolLimit is the smallest default limit on the resident
	// buffers served from size classes (see ResidentClassLimit).
	DefaultResidentPoolLimit = 64 << 20
)

// DeviceCacheCap is the default cap on the device bytes a Backend keeps
// cached for reuse: a quarter of the device's memory, and at least
// DefaultDevicePoolCap. Cached bytes count toward the Backend's budget, and
// an allocation that does not fit gives them back first.
func DeviceCacheCap(totalMemory uint64) uint64 {
	return max(totalMemory/4, DefaultDevicePoolCap)
}

// PinnedCacheCap is the default cap on the pinned host staging bytes a
// Backend keeps cached: 1/32 of the device's memory, between
// DefaultPinnedPoolCap and 1 GiB.
func PinnedCacheCap(totalMemory uint64) uint64 {
	return min(max(totalMemory/32, DefaultPinnedPoolCap), 1<<30)
}

// ResidentClassLimit is the default size of the largest resident buffer
// served from a size class (and so from the cache): 1/64 of the device's
// memory, and at least DefaultResidentPoolLimit (64 MiB). Larger buffers
// are allocated at their exact size and freed when they are freed.
func ResidentClassLimit(totalMemory uint64) int {
	return int(min(max(totalMemory/64, DefaultResidentPoolLimit), 1<<40))
}

// Option configures a Backend in Open.
type Option func(*config)

// config is what the Options set; Open fills in the defaults first. A cap
// or limit left unset follows the device's memory (see the rules above).
type config struct {
	devicePoolCap     uint64
	pinnedPoolCap     uint64
	residentPoolLimit int
	devCapSet         bool
	pinCapSet         bool
	limitSet          bool
	log               *slog.Logger
	xfer              transfer.Tuning // zero: defaults (xfer.go)
	compiler          *nvrtc.Compiler // nil: nvrtc.Default() (compile.go)
	noPDL             bool            // WithProgrammaticLaunch(false) (pdl.go)
	collChecks        bool            // WithCollectiveChecks (commcheck.go)
	pinTest           hostmem.Config  // tests only: SpareWindow, SpareRetry, EvictHook (memory.go)
}

func defaultConfig() config {
	return config{log: slog.Default()}
}

// resolve fills in the caps and limits the options left unset.
func (c *config) resolve(totalMemory uint64) {
	if !c.devCapSet {
		c.devicePoolCap = DeviceCacheCap(totalMemory)
	}
	if !c.pinCapSet {
		c.pinnedPoolCap = PinnedCacheCap(totalMemory)
	}
	if !c.limitSet {
		c.residentPoolLimit = ResidentClassLimit(totalMemory)
	}
}

// WithDevicePoolCap sets the most bytes of freed device memory kept cached
// for reuse, in place of DeviceCacheCap. Zero caches nothing: every free
// goes back to the driver.
func WithDevicePoolCap(bytes uint64) Option {
	return func(c *config) { c.devicePoolCap, c.devCapSet = bytes, true }
}

// WithPinnedPoolCap sets the most bytes of pinned host staging memory kept for
// reuse between transfers, in place of PinnedCacheCap. Zero caches nothing:
// every transfer allocates its staging and frees it afterwards. The second
// set of staging that back-to-back readbacks get (see StagingCache) is
// pinned only while all the pool's pinned bytes stay within it.
func WithPinnedPoolCap(bytes uint64) Option {
	return func(c *config) { c.pinnedPoolCap, c.pinCapSet = bytes, true }
}

// WithResidentPoolLimit sets the largest resident buffer, in bytes, served
// from a size class (rounded up by less than 1/8 and cached when freed), in
// place of ResidentClassLimit. Larger buffers are allocated at their exact
// size and go back to the driver when freed. Zero or a negative value
// allocates every resident buffer at its exact size.
func WithResidentPoolLimit(bytes int) Option {
	return func(c *config) { c.residentPoolLimit, c.limitSet = bytes, true }
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
