package fusion

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/accounting"
)

func overflowError(op, what string, i int, handle, addr uint64, n int) error {
	return &accounting.Error{
		Op:  op,
		Err: accounting.ErrOverflow,
		Detail: fmt.Sprintf("request %d: handle %d %s %#x + %d bytes does not fit in 64 bits",
			i, handle, what, addr, n),
		Fix: "pass an address and length inside the buffer the handle names",
	}
}

func negativeError(op string, i int, handle, addr uint64, n int) error {
	return &accounting.Error{
		Op:     op,
		Err:    accounting.ErrNegative,
		Detail: fmt.Sprintf("request %d: handle %d src %#x has length %d", i, handle, addr, n),
		Fix:    "pass a length of zero or more",
	}
}

func totalOverflowError(op string, handle, start, end uint64) error {
	return &accounting.Error{
		Op:  op,
		Err: accounting.ErrOverflow,
		Detail: fmt.Sprintf("handle %d: fused range [%#x, %#x) is longer than the largest int",
			handle, start, end),
		Fix: "split the batch so no fused range exceeds the largest slice length",
	}
}
