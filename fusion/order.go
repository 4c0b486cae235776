package fusion

import (
	"cmp"
	"slices"
)

// key orders requests by handle, then address, then request index. The index
// tie-break keeps the order total, so equal (handle, address) pairs stay in
// request order and the result does not depend on the sort's stability.
type key struct {
	handle, addr uint64
	index        int
}

func compareKeys(a, b key) int {
	if c := cmp.Compare(a.handle, b.handle); c != 0 {
		return c
	}
	if c := cmp.Compare(a.addr, b.addr); c != 0 {
		return c
	}
	return cmp.Compare(a.index, b.index)
}

func sortKeys(keys []key) {
	slices.SortFunc(keys, compareKeys)
}
