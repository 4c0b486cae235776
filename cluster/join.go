package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/vyre-go/vyrecuda/cluster/internal/rendezvous"
	"github.com/vyre-go/vyrecuda/core"
)

// joinComm joins b as rank of the nranks communicator id, giving up when
// ctx is done (a variable so tests can stand in for it).
var joinComm = func(ctx context.Context, b *core.Backend, id core.CommID, nranks, rank int) (*core.Comm, error) {
	return b.JoinCommContext(ctx, id, nranks, rank)
}

// Join reads this rank's place from its launcher's variables (FromEnv) and
// joins b to the job's communicator (Env.Join).
func Join(ctx context.Context, b *core.Backend) (*core.Comm, error) {
	e, err := FromEnv()
	if err != nil {
		return nil, withOp("cluster.Join", err)
	}
	return e.Join(ctx, b)
}

// Join joins b's device to the job's communicator as rank e.Rank of
// e.WorldSize. Rank 0 creates the communicator id (Backend.NewCommID) and
// serves it over TCP at e.MasterPort (on every interface, or only on
// e.MasterAddr when that is a loopback address) until every other rank has
// fetched it; the other ranks fetch it from e.Master(), retrying until
// rank 0 answers or ctx is done. Every rank then joins (Backend.JoinComm),
// which returns once all have.
//
// A rank that never comes fails the join at ctx's deadline, on rank 0
// naming the ranks missing and on the others saying what their last
// attempt to reach rank 0 met; errors.Is(err, context.DeadlineExceeded)
// holds for both. Without a deadline the ranks wait until ctx is
// cancelled. Once the id is exchanged, the join itself also stops at the
// context's deadline (Backend.JoinCommContext).
func (e Env) Join(ctx context.Context, b *core.Backend) (*core.Comm, error) {
	const op = "cluster.Join"
	switch {
	case ctx == nil:
		return nil, envError(op, "the context is nil", "pass a context with the deadline the ranks have to find each other")
	case b == nil:
		return nil, envError(op, "the Backend is nil", "open this rank's device first (cluster.Open, or core.OpenCUDA of the device Env.Device picks)")
	case ctx.Err() != nil:
		return nil, &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: context.Cause(ctx),
			Detail: "the context is already done; nothing was exchanged", Fix: "pass a live context"}
	}
	if err := e.check(op); err != nil {
		return nil, err
	}
	id, err := e.exchange(ctx, op, b)
	if err != nil {
		return nil, err
	}
	c, err := joinComm(ctx, b, id, e.WorldSize, e.Rank)
	if err != nil {
		return nil, withOp(op, err)
	}
	return c, nil
}

// check refuses an Env that FromEnv would not return.
func (e Env) check(op string) error {
	switch {
	case e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize:
		return envError(op, fmt.Sprintf("rank %d of %d ranks", e.Rank, e.WorldSize), "give a WorldSize of 1 or more and a Rank from 0 to WorldSize-1")
	case e.LocalRank < 0 || e.LocalRank > e.Rank:
		return envError(op, fmt.Sprintf("local rank %d with rank %d", e.LocalRank, e.Rank), "give a LocalRank from 0 to Rank")
	case e.WorldSize > 1 && (e.MasterAddr == "" || e.MasterPort < 1 || e.MasterPort > 65535):
		return envError(op, fmt.Sprintf("master %q port %d for %d ranks", e.MasterAddr, e.MasterPort, e.WorldSize),
			"give rank 0's host as MasterAddr and a TCP port from 1 to 65535 as MasterPort")
	}
	return nil
}

// exchange returns the communicator id: created here on rank 0 (and served
// to the others), fetched from rank 0 elsewhere.
func (e Env) exchange(ctx context.Context, op string, b *core.Backend) (core.CommID, error) {
	if e.WorldSize == 1 {
		id, err := b.NewCommID()
		return id, withOp(op, err)
	}
	if e.Rank != 0 {
		id, err := rendezvous.Fetch(ctx, e.Master(), e.Rank, e.WorldSize)
		return id, e.fetchError(op, err)
	}
	start := time.Now()
	srv, err := rendezvous.Listen(e.listenAddr(), e.WorldSize)
	if err != nil {
		return core.CommID{}, &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: err,
			Detail: fmt.Sprintf("rank 0 cannot serve the communicator id at %s", e.listenAddr()),
			Fix:    "give the job a MASTER_PORT that is free on rank 0's host, and run rank 0 on the host MASTER_ADDR names"}
	}
	id, err := b.NewCommID()
	if err != nil {
		return core.CommID{}, errors.Join(withOp(op, err), srv.Close())
	}
	if err := srv.Serve(ctx, id); err != nil {
		return core.CommID{}, e.serveError(op, err, time.Since(start))
	}
	return id, nil
}

// listenAddr is where rank 0 listens: the master address itself when it
// is a loopback address (a job on one host stays off the network), else
// every interface.
func (e Env) listenAddr() string {
	host := ""
	if ip := net.ParseIP(e.MasterAddr); e.MasterAddr == "localhost" || (ip != nil && ip.IsLoopback()) {
		host = e.MasterAddr
	}
	return net.JoinHostPort(host, strconv.Itoa(e.MasterPort))
}

// serveError describes rank 0's failure to hand out the id.
func (e Env) serveError(op string, err error, waited time.Duration) error {
	var me *rendezvous.MissingError
	if errors.As(err, &me) {
		return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: me.Err,
			Detail: fmt.Sprintf("rank 0 of %d waited %v at %s, but ranks %v never fetched the communicator id",
				e.WorldSize, waited.Round(time.Millisecond), e.listenAddr(), me.Missing),
			Fix: "start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT, check that their hosts reach rank 0's port, or give the context a longer deadline"}
	}
	return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: err,
		Detail: fmt.Sprintf("rank 0 stopped serving the communicator id at %s", e.listenAddr()),
		Fix:    "check the host's network (file descriptors, firewall) and start the job again"}
}

// fetchError describes a rank's failure to fetch the id.
func (e Env) fetchError(op string, err error) error {
	if err == nil {
		return nil
	}
	var (
		ue *rendezvous.UnreachableError
		re *rendezvous.RefusedError
		pe *rendezvous.ProtocolError
	)
	where := fmt.Sprintf("rank %d of %d, rank 0 at %s", e.Rank, e.WorldSize, e.Master())
	switch {
	case errors.As(err, &ue):
		return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: ue.Err,
			Detail: fmt.Sprintf("%s: no communicator id after %d attempts (last: %v)", where, ue.Attempts, ue.Last),
			Fix:    "start rank 0 on the host MASTER_ADDR names with the same MASTER_PORT, check that the port is reachable from this host, or give the context a longer deadline"}
	case errors.As(err, &re):
		return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: err,
			Detail: fmt.Sprintf("%s: rank 0 refused: %s", where, re.Reason),
			Fix:    "start every rank of the job with the same WORLD_SIZE and a distinct RANK from 0 to WORLD_SIZE-1, from the same build"}
	case errors.As(err, &pe):
		return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: err,
			Detail: fmt.Sprintf("%s: what answered is not a vyrecuda rank 0: %s", where, pe.Reason),
			Fix:    "give the job a MASTER_PORT that no other program listens on"}
	}
	return &core.Error{Op: op, Kind: core.KindInvalidArgument, Err: err, Detail: where,
		Fix: "check MASTER_ADDR and MASTER_PORT and start the job again"}
}

// withOp returns err under op when it is a *core.Error of another
// operation (the original is not modified).
func withOp(op string, err error) error {
	ce, ok := err.(*core.Error)
	if !ok || ce == nil || ce.Op == op {
		return err
	}
	c := *ce
	c.Op = op
	return &c
}
