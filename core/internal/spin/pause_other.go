//go:build !amd64

package spin

// CPUPause is a spin-wait hint; other architectures poll without one.
func CPUPause() {}
