package ntcopy

// available says copyNT and sfence are real (SSE2 is part of amd64).
const available = true

// copyNT copies n bytes (a multiple of 64) from src to dst (16-byte
// aligned) with non-temporal stores.
//
//go:noescape
func copyNT(dst, src *byte, n int)

// sfence orders earlier non-temporal stores before later stores.
func sfence()
