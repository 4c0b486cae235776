package collective

import (
	"context"
	"errors"
	"sync"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// Join joins cd's device as rank of the nranks communicator id and
// returns once every rank has joined or ctx is done (a nil ctx never is).
// A driver with driver.ContextJoiner stops waiting itself and leaves the
// communicator. Another driver's blocking join runs on a goroutine of its
// own that Join stops waiting for: that join goes on until the other ranks
// arrive, and the communicator it then returns is aborted at once. A done
// ctx gives an ErrInFlight wrapping ctx.Err().
func Join(ctx context.Context, op string, cd driver.CollectiveDriver, id driver.CommID, nranks, rank int) (driver.Communicator, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var c driver.Communicator
	var err error
	switch cj, ok := cd.(driver.ContextJoiner); {
	case ok:
		c, err = cj.JoinCommunicatorContext(ctx, id, nranks, rank)
	case ctx.Done() == nil:
		c, err = cd.JoinCommunicator(id, nranks, rank)
	default:
		c, err = joinInBackground(ctx, cd, id, nranks, rank)
	}
	if err != nil {
		if cause := ctx.Err(); cause != nil && errors.Is(err, cause) {
			return nil, &errs.Error{Op: op, Kind: errs.KindInFlight, Err: cause,
				Detail: "stopped waiting for the other ranks to join when the context was done; this rank is not part of the communicator",
				Fix:    "start every rank, then join again (every rank, with a new CommID if any rank joined already), with a context that allows them the time"}
		}
		return nil, CommError(op, "JoinCommunicator", err)
	}
	if c == nil {
		return nil, errs.NullSuccess(op, "JoinCommunicator")
	}
	return c, nil
}

// joinInBackground runs cd's blocking join on a goroutine and returns its
// result, or ctx.Err() once ctx is done; a join that completes after that
// has its communicator aborted.
func joinInBackground(ctx context.Context, cd driver.CollectiveDriver, id driver.CommID, nranks, rank int) (driver.Communicator, error) {
	type result struct {
		c   driver.Communicator
		err error
	}
	var mu sync.Mutex // guards gaveUp
	gaveUp := false
	out := make(chan result, 1)
	go func() {
		c, err := cd.JoinCommunicator(id, nranks, rank)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			if c != nil {
				_ = c.Abort() // nobody is left to report it to
			}
			return
		}
		out <- result{c, err}
	}()
	select {
	case r := <-out:
		return r.c, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-out: // it completed meanwhile
		return r.c, r.err
	default:
	}
	gaveUp = true
	return nil, ctx.Err()
}
