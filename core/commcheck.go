package core

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"

	"github.com/vyre-go/vyrecuda/core/internal/collective"
)

// CollectiveChecksEnv names the environment variable that turns collective
// checks on for every Comm a process joins, as WithCollectiveChecks does:
// "1" or "true" (any value strconv.ParseBool takes as true).
const CollectiveChecksEnv = "VYRECUDA_COLLECTIVE_CHECKS"

// WithCollectiveChecks makes every Comm joined on the Backend compare each
// collective call across its ranks before queueing it: the ranks first
// exchange a description of their call (the collective, element count,
// data type, reduction and root) with one all-gather of 48 bytes per rank,
// and when the calls differ, or a rank refused its own part, every rank
// fails with the same ErrInvalidArgument naming each rank's call, where
// NCCL would hang or corrupt memory. It costs that all-gather and two
// small copies per call; every rank must turn it on (the environment
// variable CollectiveChecksEnv does so for a whole job). Group collectives
// need no option: a Group sees every rank's arguments and always checks
// them.
func WithCollectiveChecks() Option {
	return func(c *config) { c.collChecks = true }
}

// collectiveChecksEnv reports whether CollectiveChecksEnv turns the checks
// on; a value ParseBool does not take is logged and leaves them off.
func collectiveChecksEnv(log *slog.Logger) bool {
	v, set := os.LookupEnv(CollectiveChecksEnv)
	if !set || v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		log.Warn("ignoring an environment variable that is not a boolean", "name", CollectiveChecksEnv, "value", v)
	}
	return on
}

// commChecks holds the buffer a Comm's exchange of call descriptions
// uses, resident on the Comm's Backend: one description per rank, rank r's
// at byte r*DescBytes, gathered in place.
type commChecks struct {
	buf Buffer
}

func newCommChecks(op string, b *Backend, nranks int) (*commChecks, error) {
	buf, err := b.store.allocate(op, nranks*collective.DescBytes, false)
	if err != nil {
		return nil, err
	}
	return &commChecks{buf: buf}, nil
}

// free frees k's buffer (nothing for a nil k, or once b is closed).
func (k *commChecks) free(op string, b *Backend) {
	if k == nil {
		return
	}
	if err := b.freeResident(op, k.buf, false); err != nil && !errors.Is(err, ErrClosed) {
		b.log.Error("freeing a collective check buffer failed", "op", op, "err", err)
	}
}

// agree exchanges this rank's description of the call (a with count
// elements per rank block, or a refusal when local is set) with every
// rank's, by an in-place all-gather, and compares them
// (collective.Agreement). A failed exchange aborts the communicator so no
// rank waits for this one. c.mu is held and c.b entered.
func (c *Comm) agree(ctx context.Context, op string, a *collective.Args, count uint64, local error) error {
	desc := make([]byte, collective.DescBytes)
	a.Desc(count, local).Put(desc)
	k, off := c.chk, c.rank*collective.DescBytes
	if err := c.b.upload(op, 1, func(int) (Buffer, int, []byte) { return k.buf, off, desc }, false); err != nil {
		c.abort()
		return err
	}
	if c.aborted() {
		return abortedComm(op)
	}
	part := (&rankBufs{b: c.b, rank: c.rank, recv: k.buf}).part(queueComm{c})
	part.SendLen = collective.DescBytes
	pin := part.Pin
	part.Pin = func(op string, _ bool) (recvPtr, sendPtr uint64, err error) {
		recvPtr, _, err = pin(op, false)
		return recvPtr, recvPtr + uint64(off), err
	}
	ex := collective.Args{Kind: collective.AllGather, DT: DataInt64, Ranks: c.size}
	if err := collective.Run(ctx, &collective.Call{Op: op, Args: ex, Parts: []*collective.Part{part}, Abort: c.abort}); err != nil {
		return err
	}
	raw, err := c.b.readOne(op, k.buf.All(), nil, false)
	if err != nil {
		c.abort()
		return err
	}
	descs := make([]collective.Desc, c.size)
	for i := range descs {
		descs[i] = collective.ReadDesc(raw[i*collective.DescBytes:])
	}
	return collective.Agreement(op, descs)
}
