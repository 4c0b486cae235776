package core

import "fmt"

// rangeWhy says, in the caller's terms, why n bytes at offset off do not
// fit a buffer of limit bytes, for the range errors of every call: the
// numbers and which of them is wrong, never the checked arithmetic's own
// text.
func rangeWhy(off, n, limit int) string {
	switch {
	case off < 0 && n < 0:
		return fmt.Sprintf("the offset %d and the length %d are negative", off, n)
	case off < 0:
		return fmt.Sprintf("the offset %d is negative", off)
	case n < 0:
		return fmt.Sprintf("the length %d is negative", n)
	case off > limit:
		return fmt.Sprintf("the offset %d is past the buffer's end at %d", off, limit)
	}
	return fmt.Sprintf("only %d bytes fit after offset %d", limit-off, off)
}
