//go:build !amd64

package core

// cpuPause is a spin-wait hint; other architectures poll without one.
func cpuPause() {}
