package core

import (
	"context"
	"time"
)

// Waiting with a context.Context.
//
// Device work cannot be cancelled once queued. The context forms below stop
// the caller's wait when the context is done and return an ErrInFlight
// error that wraps ctx.Err() (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded holds); the work keeps running. Nothing leaks:
// its buffers stay in flight (Free refuses them) and its staging and
// stream stay held until the work is collected, by a later Await, AwaitInto,
// IsReady or Close of the Pending, which all still work after a cancelled
// wait. RunContext and Graph.ReplayContext, whose callers never see the
// Pending, collect it in the background once the device finishes (its reads
// are dropped), and Backend.Close waits for that.
//
// The wait polls the completion event with a short backoff (a few
// microseconds at first, at most waitPollMax between queries), so it adds at
// most that much latency over the blocking forms; a context that can never
// be done (context.Background) uses the blocking wait. While another
// goroutine blocks in a Pending's Await, the context forms keep polling
// until that wait ends or their context is done, whichever comes first.
// The query that sees the work finish counts as the wait's fence in
// Telemetry's SyncPoints, as the blocking forms' synchronization does.

// waitPollMax bounds the sleep between completion queries.
const waitPollMax = 500 * time.Microsecond

// readyCtx waits until w has finished, polling, or ctx is done. It never
// waits for w.mu: another goroutine may hold it for as long as its blocking
// Await waits in the driver's fence, so a poll that finds it held counts as
// "not finished yet" and the loop goes on watching ctx.
func readyCtx(op string, ctx context.Context, w *pendingWork) error {
	if ctx == nil {
		return newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	}
	if ctx.Done() == nil {
		return nil
	}
	delay := time.Duration(0)
	for spins := 0; ; spins++ {
		if w.pollReady() {
			return nil // the failure, if any, is reported by the caller's Await
		}
		if err := ctx.Err(); err != nil {
			return cancelled(op, err)
		}
		if spins < 64 {
			continue // work that finishes within microseconds is collected at once
		}
		delay = min(max(2*delay, 4*time.Microsecond), waitPollMax)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return cancelled(op, ctx.Err())
		case <-t.C:
		}
	}
}

// pollReady is IsReady for readyCtx: it reports false, without waiting,
// when another goroutine holds w.mu. The query that sees the work finish
// is the wait's fence, and counts as one, as a blocking wait's
// synchronization does.
func (w *pendingWork) pollReady() bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	queued := w.state == pendingQueued
	if !w.query() {
		return false
	}
	if queued && w.err == nil {
		w.b.tel.SyncPoints.Add(1)
	}
	return true
}

func cancelled(op string, cause error) *Error {
	return &Error{Op: op, Kind: KindInFlight, Detail: "stopped waiting; the work is still running on the device",
		Fix: "collect the Pending later with Await, AwaitInto or Close (its buffers stay in flight until then)", Err: cause}
}

// doneBefore reports a context that was done before anything was queued
// (what names the step skipped): ErrInFlight wrapping ctx.Err(), as every
// context form reports a done context.
func doneBefore(op, what string, cause error) *Error {
	return &Error{Op: op, Kind: KindInFlight, Detail: "the context is already done; nothing was " + what,
		Fix: "pass a context that is not done yet", Err: cause}
}

// AwaitContext is Await that stops waiting when ctx is done; see the note
// on waiting with a context above for what happens to the work then. Work
// that has already finished is reported even when ctx is done. It returns
// when ctx is done also while another goroutine blocks in Await, AwaitInto
// or Close of the same Pending.
func (p *Pending) AwaitContext(ctx context.Context) error {
	const op = "Pending.AwaitContext"
	w, err := p.work(op)
	if err != nil {
		return err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		return err
	}
	return withOp(op, p.Await())
}

// AwaitIntoContext is AwaitInto that stops waiting when ctx is done, leaving
// dst unchanged and the reads available to a later AwaitInto.
func (p *Pending) AwaitIntoContext(ctx context.Context, dst [][]byte) ([][]byte, error) {
	const op = "Pending.AwaitIntoContext"
	w, err := p.work(op)
	if err != nil {
		return dst, err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		return dst, err
	}
	return w.awaitInto(op, dst)
}

// RunContext is Run that stops waiting when ctx is done. A context already
// done queues nothing and gives the same ErrInFlight wrapping ctx.Err().
// When the wait is cancelled, the batch still runs to
// completion; a background goroutine then collects it (its reads are
// dropped, its buffers leave flight), and Backend.Close waits for that. dst
// is returned unchanged on any failure.
func (b *Backend) RunContext(ctx context.Context, batch Batch, dst [][]byte) ([][]byte, error) {
	const op = "RunContext"
	if ctx == nil {
		return dst, newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	}
	if err := ctx.Err(); err != nil {
		return dst, doneBefore(op, "queued", err)
	}
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &batch, ctx.Done() != nil, nil)
	if err != nil {
		return dst, err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		b.abandoned.Add(1)
		go func() {
			defer b.abandoned.Done()
			if err := w.close(op); err != nil { // close released everything either way
				b.log.Error("work whose RunContext was cancelled failed on the device", "op", op, "err", err)
			}
		}()
		return dst, err
	}
	return w.awaitInto(op, dst)
}

// ReplayContext is Graph.Replay that stops waiting when ctx is done. A
// context already done launches nothing and gives the same ErrInFlight
// wrapping ctx.Err(). When the wait is cancelled the
// replay keeps running; a background goroutine collects it (its reads are
// dropped), and until it has, further replays and Graph.Close refuse with
// ErrInFlight; Backend.Close waits for it. dst is returned unchanged on any
// failure. A context that can never be done (context.Background) takes
// Replay's path: one launch and one fence.
func (g *Graph) ReplayContext(ctx context.Context, dst [][]byte) ([][]byte, error) {
	const op = "Graph.ReplayContext"
	switch {
	case g == nil:
		return dst, nilGraph(op)
	case ctx == nil:
		return dst, newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	case ctx.Err() != nil:
		return dst, doneBefore(op, "launched", ctx.Err())
	case ctx.Done() == nil:
		out, err := g.Replay(dst)
		return out, withOp(op, err)
	}
	p, err := g.ReplayAsync()
	if err != nil {
		return dst, withOp(op, err)
	}
	if err := readyCtx(op, ctx, p.w); err != nil {
		b := g.b
		if eerr := b.enter(op); eerr != nil {
			return dst, err // Close ran meanwhile: it waited for nothing it did not own
		}
		b.abandoned.Add(1)
		b.exit()
		go func() {
			defer b.abandoned.Done()
			if err := p.Close(); err != nil {
				b.log.Error("graph replay whose wait was cancelled failed on the device", "op", op, "err", err)
			}
		}()
		return dst, err
	}
	out, err := p.w.awaitInto(op, dst)
	return out, withOp(op, err)
}
