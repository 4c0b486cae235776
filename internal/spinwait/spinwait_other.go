//go:build !amd64

package spinwait

// Pause does nothing on architectures without a spin-wait hint here.
func Pause() {}
