package core_test

import "github.com/vyre-go/vyrecuda/core"

// allOf returns the range of every byte of each buffer, in order: what
// DownloadMany reads to fetch whole buffers.
func allOf(hs []core.Buffer) []core.Range {
	rs := make([]core.Range, len(hs))
	for i, h := range hs {
		rs[i] = h.All()
	}
	return rs
}
