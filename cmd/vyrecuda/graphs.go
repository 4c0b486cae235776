package main

import (
	"errors"

	"github.com/vyre-go/vyrecuda/core"
)

// W5G: W5's batch captured once into a CUDA graph (Backend.Capture), then
// one Graph.Replay per run: one graph launch and one fence. It shares W5's
// buffers, CPU model and final check, so a replay that silently skipped
// its launches fails the bench.
func prepareGraphLaunches(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	l, err := newLaunchChain(b, cfg)
	if err != nil {
		return nil, nil, err
	}
	g, err := b.Capture(l.batch)
	if err != nil {
		return nil, nil, errors.Join(err, l.cleanup())
	}
	body := func() error {
		if _, err := g.Replay(nil); err != nil {
			return err
		}
		l.advance()
		return nil
	}
	cleanup := func() error {
		// The graph holds the buffers in flight: close it before the check
		// frees them.
		return errors.Join(g.Close(), l.cleanup())
	}
	return body, cleanup, nil
}

// W5C: Backend.Capture of W5's batch, one per run (stream capture and
// instantiation; nothing runs on the device). The graphs are closed in
// cleanup, outside the timing.
func prepareCapture(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	l, err := newLaunchChain(b, cfg)
	if err != nil {
		return nil, nil, err
	}
	// One Run loads the module, so the timing is of capture alone.
	if _, err := b.Run(l.batch, nil); err != nil {
		return nil, nil, errors.Join(err, l.cleanup())
	}
	l.advance()
	var graphs []*core.Graph
	body := func() error {
		g, err := b.Capture(l.batch)
		if err != nil {
			return err
		}
		graphs = append(graphs, g)
		return nil
	}
	cleanup := func() error {
		var errs []error
		for _, g := range graphs {
			errs = append(errs, g.Close())
		}
		return errors.Join(append(errs, l.cleanup())...)
	}
	return body, cleanup, nil
}
