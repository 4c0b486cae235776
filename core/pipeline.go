package core

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// This file owns the staging blocks and streams of a staged transfer;
// staged.go runs staged transfers and the parts of packed uploads on them,
// and their host copies run as copy jobs (core/internal/copyjob).

// spinner paces one polling loop (spin.Spinner); its zero value is ready.
type spinner struct{ spin.Spinner }

// pause is called once per poll that found nothing to do (spin.Spinner.Pause).
func (s *spinner) pause() (time.Time, bool) { return s.Spinner.Pause() }

// pipeline is the staging blocks and streams of one pipelined transfer.
type pipeline struct {
	b      *Backend
	op     string
	ents   []*residentEntry // the transfer's resident buffer, for the quarantine
	st     hostmem.Staging
	blocks [][]byte
	leases []*streams.Lease
	syncs  uint64 // stream synchronizations that succeeded
}

// newPipeline takes k staging blocks of chunk bytes and leases leased
// streams (with their events), all or nothing, for a transfer whose caller
// holds ents in flight.
func (b *Backend) newPipeline(op string, ents []*residentEntry, k, chunk, leases int) (*pipeline, error) {
	p := &pipeline{b: b, op: op, ents: ents, st: hostmem.NewStaging(b.hostPool)}
	p.blocks = make([][]byte, k)
	for j := range p.blocks {
		blk, err := p.st.Slice(op, chunk)
		if err != nil {
			p.st.ReturnAll()
			return nil, err
		}
		p.blocks[j] = blk
	}
	p.leases = make([]*streams.Lease, 0, leases)
	for range leases {
		l, err := b.launch.Lease(op, false)
		if err != nil {
			p.finish(true)
			return nil, err
		}
		p.leases = append(p.leases, l)
	}
	return p, nil
}

// wait blocks until the work queued on block j's stream has completed.
func (p *pipeline) wait(j int) error {
	if err := p.b.drv.StreamSynchronize(p.leases[j].Stream); err != nil {
		return driverError(p.op, "StreamSynchronize", err)
	}
	p.syncs++
	return nil
}

// fail drains every stream so no queued copy still uses the staging, gives
// everything back (or, when a drain fails, quarantines it) and returns err.
func (p *pipeline) fail(err error) error {
	p.b.syncOrQuarantine(p.op, inUse{st: []*hostmem.Staging{&p.st}, ents: p.ents}, p.leases...)
	p.leases = nil
	p.st.ReturnAll()
	return err
}

// finish gives the streams back (healthy or not) and the staging blocks to
// their pool. Every stream must be idle.
func (p *pipeline) finish(healthy bool) {
	p.giveBackLeases(healthy)
	p.st.ReturnAll()
}

// giveBackLeases gives the streams back (healthy or not); every stream
// must be idle.
func (p *pipeline) giveBackLeases(healthy bool) {
	for _, l := range p.leases {
		p.b.launch.Return(l, healthy)
	}
	p.leases = nil
}
