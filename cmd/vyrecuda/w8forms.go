package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/vyre-go/vyrecuda/core"
)

// W8's forms, in the order bench runs and prints them.
const (
	w8Run       = "run"        // Run from Go slices
	w8RunPinned = "run-pinned" // Run from memory pinned through the Backend
	w8Replay    = "replay"     // Graph.Replay from pinned memory
	w8Calls     = "calls"      // Upload, Dispatch, Download
	w8Floor     = "floor"      // the raw driver
)

// w8Form is one way of running the step.
type w8Form struct {
	ID    string
	Title string
	// Peer is the PyTorch form it is compared with (peerPageable, ...);
	// empty for none.
	Peer   string
	Target w8Target
}

// w8Forms lists the forms with their targets on the H100.
var w8Forms = []w8Form{
	{ID: w8Run, Title: "Run from Go slices", Peer: peerPageable, Target: w8Target{MaxXPeer: 0.8}},
	{ID: w8RunPinned, Title: "Run from Backend-pinned memory", Peer: peerPinned, Target: w8Target{MaxXPeer: 1, MaxXFloor: 1.3, FloorFrom: 128 << 10}},
	{ID: w8Replay, Title: "Graph.Replay from Backend-pinned memory", Peer: peerGraph, Target: w8Target{MaxXPeer: 1, MaxXFloor: 1.3, FloorFrom: 128 << 10}},
	{ID: w8Calls, Title: "three calls: Upload, Dispatch, Download", Peer: peerPageable},
	{ID: w8Floor, Title: "floor: raw driver, pinned async copies, launch, one sync"},
}

// w8Body is one form prepared on a fixture: the measured step, the input it
// moves, its last output, and what to release afterwards.
type w8Body struct {
	step  func() error
	in    []byte
	out   func() []byte
	close func() error
}

// prepareW8Form builds form id on f. drv is the driver under f's Backend,
// for the floor; the floor is skipped (ok false) when it is nil.
func prepareW8Form(id string, f *w8Fixture, drv core.Driver) (body w8Body, ok bool, err error) {
	n := f.n
	none := func() error { return nil }
	switch id {
	case w8Run, w8RunPinned:
		in, dst := f.goIn, [][]byte{make([]byte, 0, n)}
		if id == w8RunPinned {
			in, dst = f.pinIn.Bytes()[:n], [][]byte{f.pinOut.Bytes()[:0]}
		}
		batch := f.batch(in)
		step := func() (err error) {
			f.touch(in)
			dst, err = f.b.Run(batch, dst)
			return err
		}
		return w8Body{step: step, in: in, out: func() []byte { return dst[0] }, close: none}, true, nil
	case w8Replay:
		// The read's destination is given at capture (Batch.Into), so each
		// replay lands it in the pinned output by DMA.
		in, dst := f.pinIn.Bytes()[:n], [][]byte(nil)
		batch := f.batch(in)
		batch.Into = [][]byte{f.pinOut.Bytes()[:n]}
		g, err := f.b.Capture(batch)
		if err != nil {
			return w8Body{}, false, err
		}
		step := func() (err error) {
			f.touch(in)
			dst, err = g.Replay(dst)
			return err
		}
		return w8Body{step: step, in: in, out: func() []byte { return dst[0] }, close: g.Close}, true, nil
	case w8Calls:
		in, out := f.goIn, make([]byte, 0, n)
		cfg := core.DispatchConfig{Args: f.args}
		step := func() (err error) {
			f.touch(in)
			if err := f.b.Upload(core.UploadAt{Buf: f.x, Data: in}); err != nil {
				return err
			}
			if err := f.b.Dispatch(f.prog, nil, cfg); err != nil {
				return err
			}
			out, err = f.b.Download(f.y.All(), out)
			return err
		}
		return w8Body{step: step, in: in, out: func() []byte { return out }, close: none}, true, nil
	}
	if drv == nil {
		return w8Body{}, false, nil
	}
	body, err = prepareW8Floor(f, drv)
	return body, err == nil, err
}

// measureW8 runs every form at every size of cfg and returns the rows, with
// their ratios and targets filled in. At each size the forms take turns in
// blocks of steps (the first form rotating), so a change in the host's
// speed during the run weighs on every form alike and the ratios between
// them hold.
func measureW8(s *session, cfg benchConfig, peers *w8Peers, prog *progress, step *int, total int) ([]w8Row, error) {
	p, err := compileW8(s.Backend)
	if err != nil {
		return nil, fmt.Errorf("compiling the kernel: %w", err)
	}
	var rows []w8Row
	for _, n := range cfg.W8Sizes {
		f, err := newW8Fixture(s.Backend, p, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", formatBytes(uint64(n)), err)
		}
		*step++
		prog.start(*step, total, fmt.Sprintf("W8 %s each way: %d forms in turn", formatBytes(uint64(n)), len(w8Forms)))
		rs, err := measureW8Size(s, f, cfg, prog)
		if err = errors.Join(err, f.close()); err != nil {
			return nil, fmt.Errorf("%s: %w", formatBytes(uint64(n)), err)
		}
		rows = append(rows, rs...)
	}
	judgeW8(rows, peers, s.Kind == deviceCUDA)
	return rows, nil
}

// w8Block is how many measured steps a form runs in a row before the next
// form's turn, and w8Settle how many unmeasured steps come first, so that
// what the previous form left running (its copy helpers' eviction of
// staging, their polling) has ended before the form is timed.
const (
	w8Block  = 25
	w8Settle = 5
)

// w8Prepared is a form ready to run, with its measurements.
type w8Prepared struct {
	form  w8Form
	body  w8Body
	times []time.Duration
	syncs uint64
}

// run runs settle unmeasured steps and then n measured ones, adding their
// times and the Backend's sync points during them to p.
func (p *w8Prepared) run(b *core.Backend, settle, n int) error {
	for range settle {
		if err := p.body.step(); err != nil {
			return fmt.Errorf("%s: %w", p.form.ID, err)
		}
	}
	syncs := b.Telemetry().SyncPoints
	for range n {
		start := time.Now()
		err := p.body.step()
		d := time.Since(start)
		if err != nil {
			return fmt.Errorf("%s: %w", p.form.ID, err)
		}
		p.times = append(p.times, max(d, time.Nanosecond))
	}
	p.syncs += b.Telemetry().SyncPoints - syncs
	return nil
}

// measureW8Size prepares every form on f, runs W8Warmup unmeasured steps
// of each, then W8Steps measured steps of each, interleaved in blocks
// (w8Block), checks every
// form's output of one more step against the CPU and summarizes.
func measureW8Size(s *session, f *w8Fixture, cfg benchConfig, prog *progress) (rows []w8Row, err error) {
	var forms []*w8Prepared
	defer func() {
		for _, p := range forms {
			err = errors.Join(err, p.body.close())
		}
	}()
	for _, form := range w8Forms {
		body, ok, err := prepareW8Form(form.ID, f, s.drv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", form.ID, err)
		}
		if ok {
			forms = append(forms, &w8Prepared{form: form, body: body, times: make([]time.Duration, 0, cfg.W8Steps)})
		}
	}
	for _, p := range forms {
		if err := p.run(s.Backend, cfg.W8Warmup, 0); err != nil {
			return nil, err
		}
	}
	for done := 0; done < cfg.W8Steps; done += w8Block {
		prog.tick(done+1, cfg.W8Steps)
		n := min(w8Block, cfg.W8Steps-done)
		for k := range forms {
			p := forms[(done/w8Block+k)%len(forms)]
			if err := p.run(s.Backend, w8Settle, n); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range forms {
		// The forms share their inputs and device buffers, so each is
		// checked on one more step of its own.
		if err := p.body.step(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.form.ID, err)
		}
		if err := verifyW8(fmt.Sprintf("W8 %s %s", formatBytes(uint64(f.n)), p.form.ID), p.body.in, p.body.out()); err != nil {
			return nil, err
		}
		st := summarize(p.times)
		rows = append(rows, w8Row{
			Form: p.form.ID, Title: p.form.Title, Bytes: int64(f.n), Steps: len(p.times),
			MedianNs: st.Median.Nanoseconds(), MinNs: st.Min.Nanoseconds(), MaxNs: st.Max.Nanoseconds(),
			SyncsPerStep: float64(p.syncs) / float64(max(len(p.times), 1)), Verified: true,
		})
	}
	return rows, nil
}
