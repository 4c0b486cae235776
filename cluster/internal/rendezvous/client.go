package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// Retry pacing: Fetch waits FirstRetry after a failed attempt, doubling up
// to MaxRetry; each dial may take up to DialTimeout.
const (
	FirstRetry  = 20 * time.Millisecond
	MaxRetry    = time.Second
	DialTimeout = 3 * time.Second
)

// RefusedError is Fetch's failure when rank 0 refused the caller; it does
// not retry.
type RefusedError struct{ Reason string }

// Error gives rank 0's reason.
func (e *RefusedError) Error() string { return "rendezvous: rank 0 refused: " + e.Reason }

// UnreachableError is Fetch's failure when ctx is done before rank 0
// handed out the id.
type UnreachableError struct {
	Attempts int
	Last     error // the last attempt's failure; nil if none was made
	Err      error // ctx.Err()
}

// Error gives the attempts, the last failure and why the wait ended.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("rendezvous: no id from rank 0 after %d attempts (last: %v): %v", e.Attempts, e.Last, e.Err)
}

// Unwrap returns ctx.Err(), so errors.Is(err, context.DeadlineExceeded) holds.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Fetch asks rank 0 at addr ("host:port") for the id, as rank of a job of
// world ranks, until it answers or ctx is done. A refused connection, a
// timeout or a broken connection is retried; a refusal by rank 0
// (*RefusedError) and a peer that breaks the protocol (*ProtocolError) are
// returned at once; ctx done first gives an *UnreachableError.
func Fetch(ctx context.Context, addr string, rank, world int) (driver.CommID, error) {
	if rank < 1 || rank >= world {
		return driver.CommID{}, fmt.Errorf("rendezvous: rank %d of %d does not fetch the id", rank, world)
	}
	wait := FirstRetry
	var last error
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return driver.CommID{}, &UnreachableError{Attempts: attempt - 1, Last: last, Err: context.Cause(ctx)}
		}
		id, err := fetchOnce(ctx, addr, rank, world)
		var pe *ProtocolError
		var re *RefusedError
		switch {
		case err == nil:
			return id, nil
		case errors.As(err, &pe), errors.As(err, &re):
			return driver.CommID{}, err
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return driver.CommID{}, &UnreachableError{Attempts: attempt, Last: last, Err: context.Cause(ctx)}
		case <-t.C:
		}
		wait = min(2*wait, MaxRetry)
	}
}

// fetchOnce makes one attempt: dial, hello, reply, ack.
func fetchOnce(ctx context.Context, addr string, rank, world int) (driver.CommID, error) {
	d := net.Dialer{Timeout: DialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return driver.CommID{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := c.SetDeadline(deadline(ctx)); err != nil {
		return driver.CommID{}, err
	}
	if _, err := c.Write(encodeHello(rank, world)); err != nil {
		return driver.CommID{}, err
	}
	id, why, err := readReply(c)
	if err != nil {
		return driver.CommID{}, err
	}
	if why != "" {
		return driver.CommID{}, &RefusedError{Reason: why}
	}
	if _, err := c.Write(encodeAck(rank)); err != nil {
		return driver.CommID{}, err
	}
	return id, nil
}
