package core

import (
	"context"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
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
// or Close of the same Pending. Work with collective steps (a batch's, or a
// graph replay's) is not left waiting for other ranks: the context's end
// aborts their communicators, the work then ends, and its Await reports
// the same ErrInFlight.
func (p *Pending) AwaitContext(ctx context.Context) error {
	const op = "Pending.AwaitContext"
	w, err := p.work(op)
	if err != nil {
		return err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		return w.giveUp(op, ctx, err)
	}
	return withOp(op, p.Await())
}

// AwaitIntoContext is AwaitInto that stops waiting when ctx is done, leaving
// dst unchanged and the reads available to a later AwaitInto (work with
// collective steps is abandoned instead, as AwaitContext says).
func (p *Pending) AwaitIntoContext(ctx context.Context, dst [][]byte) ([][]byte, error) {
	const op = "Pending.AwaitIntoContext"
	w, err := p.work(op)
	if err != nil {
		return dst, err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		return dst, w.giveUp(op, ctx, err)
	}
	return w.awaitInto(op, dst)
}

// RunContext is Run that stops waiting when ctx is done. A context already
// done queues nothing and gives the same ErrInFlight wrapping ctx.Err().
// When the wait is cancelled, the batch still runs to
// completion; a background goroutine then collects it (its reads are
// dropped, its buffers leave flight), and Backend.Close waits for that. dst
// is returned unchanged on any failure.
//
// A batch with collective steps is not left running: a context done
// before it is queued aborts their communicators (as a Comm's context
// forms do, so that no rank waits for this one), and one done while it
// runs aborts them, drains the batch and releases everything before
// RunContext returns; its recv buffers then hold undefined bytes.
func (b *Backend) RunContext(ctx context.Context, batch Batch, dst [][]byte) ([][]byte, error) {
	const op = "RunContext"
	if ctx == nil {
		return dst, newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	}
	bc, err := lockComms(ctx, op, b, batch.Steps)
	if err != nil {
		return dst, err
	}
	defer bc.unlock()
	if err := ctx.Err(); err != nil {
		e := doneBefore(op, "queued", err)
		if comms := bc.list(); comms != nil {
			abortComms(comms)
			e.Detail += "; the communicators of its collective steps were aborted, so that no rank waits for this one"
		}
		return dst, e
	}
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	w, err := b.enqueue(op, &batch, ctx.Done() != nil, nil, bc)
	bc.unlock()
	if err != nil {
		return dst, err
	}
	if err := readyCtx(op, ctx, w); err != nil {
		if w.comms != nil {
			return dst, w.abandon(op, ctx)
		}
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

// giveUp is what a context wait on w returns when ctx is done first (err,
// from readyCtx). Work with collective steps is abandoned: the
// communicators are aborted, so that no rank waits for this one and the
// work ends, and the failure, also the work's, says so.
func (w *pendingWork) giveUp(op string, ctx context.Context, err error) error {
	if w.comms == nil {
		return err
	}
	e := &Error{Op: op, Kind: KindInFlight, Err: ctx.Err(),
		Detail: "stopped waiting when the context was done; the communicators of the work's collective steps were aborted so that no rank waits for this one, so the work ends, its recv buffers undefined",
		Fix:    "collect the Pending (Await, AwaitInto or Close), and join a new communicator on every rank (Group.Comm joins a new one)"}
	w.abortErr.CompareAndSwap(nil, e)
	abortComms(w.comms)
	return e
}

// abandon gives up on work with collective steps whose context is done
// (giveUp), then drains and releases it before it returns, as a Comm's
// context forms do.
func (w *pendingWork) abandon(op string, ctx context.Context) error {
	_ = w.giveUp(op, ctx, nil)
	if err := w.close(op); err != nil {
		w.b.log.Warn("work abandoned when its context was done failed on the device", "op", op, "err", err)
	}
	return collective.Cancelled(op, ctx.Err(), true, true)
}

// ReplayContext is Graph.Replay that stops waiting when ctx is done. A
// context already done launches nothing and gives the same ErrInFlight
// wrapping ctx.Err(). When the wait is cancelled the
// replay keeps running; a background goroutine collects it (its reads are
// dropped), and until it has, further replays and Graph.Close refuse with
// ErrInFlight; Backend.Close waits for it. dst is returned unchanged on any
// failure. A context that can never be done (context.Background) takes
// Replay's path: one launch and one fence. A graph with collective steps
// is handled as RunContext handles a batch with them: its communicators
// are aborted when the context is done (the Graph then refuses replays),
// and a replay under way is drained before ReplayContext returns.
func (g *Graph) ReplayContext(ctx context.Context, dst [][]byte) ([][]byte, error) {
	const op = "Graph.ReplayContext"
	switch {
	case g == nil:
		return dst, nilGraph(op)
	case ctx == nil:
		return dst, newError(op, KindInvalidArgument, "context is nil", "pass context.Background() or a context of your own")
	case ctx.Err() != nil:
		return dst, g.doneBefore(op, ctx.Err())
	case ctx.Done() == nil:
		out, err := g.Replay(dst)
		return out, withOp(op, err)
	}
	p, err := g.ReplayAsync()
	if err != nil {
		return dst, withOp(op, err)
	}
	if err := readyCtx(op, ctx, p.w); err != nil {
		if p.w.comms != nil {
			return dst, p.w.abandon(op, ctx)
		}
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

// doneBefore is ReplayContext's error for a context done before the
// launch; it aborts the communicators of an open graph's collective steps,
// whose other ranks would wait for this replay.
func (g *Graph) doneBefore(op string, cause error) *Error {
	e := doneBefore(op, "launched", cause)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed && g.comms != nil {
		abortComms(g.comms)
		e.Detail += "; the communicators of its collective steps were aborted, so that no rank waits for this one"
	}
	return e
}
