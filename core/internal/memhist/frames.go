package memhist

import (
	"runtime"
	"strings"
)

// Frame is one symbolized stack frame.
type Frame struct {
	Function string
	File     string
	Line     int
}

// Frames symbolizes pcs (inlined calls expanded), drops the leading frames
// whose function starts with one of the prefixes (the library's own), and
// returns at most n of the rest. When every frame matches a prefix it
// returns the first n unfiltered, so a stack is never empty for want of a
// caller outside the library. Runtime frames (runtime.main,
// runtime.goexit) are dropped at the outer end.
func Frames(pcs []uintptr, prefixes []string, n int) []Frame {
	if len(pcs) == 0 || n <= 0 {
		return nil
	}
	var all []Frame
	it := runtime.CallersFrames(pcs)
	for {
		f, more := it.Next()
		if f.Function != "" && !strings.HasPrefix(f.Function, "runtime.") {
			all = append(all, Frame{Function: f.Function, File: f.File, Line: f.Line})
		}
		if !more {
			break
		}
	}
	start := 0
	for start < len(all) && hasPrefix(all[start].Function, prefixes) {
		start++
	}
	if start == len(all) {
		start = 0
	}
	all = all[start:]
	return all[:min(n, len(all))]
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
