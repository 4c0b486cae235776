package streams

import (
	"context"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// waitPollMax bounds the sleep between two queries of Wait.
const waitPollMax = 500 * time.Microsecond

// waitSpins is how many queries Wait makes back to back before it sleeps
// between them: work that ends within microseconds is seen at once.
const waitSpins = 64

// Wait waits until the work queued on s has finished. With a context that
// can never be done (nil, or one whose Done is nil) it is one
// StreamSynchronize. Otherwise it queries the stream, back to back at first
// and then with a sleep that doubles up to waitPollMax, until the stream
// reports done or ctx is done; then it returns ctx.Err() and the work stays
// queued (the caller decides what becomes of it). A driver failure is
// returned as it is. A stream that is done is reported done even when ctx
// is done too.
func Wait(ctx context.Context, drv driver.Driver, s driver.Stream) error {
	if ctx == nil || ctx.Done() == nil {
		return drv.StreamSynchronize(s)
	}
	delay := time.Duration(0)
	for polls := 0; ; polls++ {
		done, err := drv.StreamQuery(s)
		if err != nil || done {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if polls < waitSpins {
			continue
		}
		delay = min(max(2*delay, 4*time.Microsecond), waitPollMax)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
