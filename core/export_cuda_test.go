package core

// SetContextAskFirstForTest switches how the CUDA driver makes its context
// current (see askFirst), so benchmarks can compare both ways; it returns the
// previous setting.
func SetContextAskFirstForTest(v bool) bool { return askFirst.Swap(v) }
