package core

// cacheNotifier returns drv's CacheNotifier, or nil.
func cacheNotifier(drv Driver) CacheNotifier {
	n, _ := drv.(CacheNotifier)
	return n
}
