package main

import (
	"errors"
	"fmt"

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
// their ratios and targets filled in.
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
		for _, form := range w8Forms {
			*step++
			prog.start(*step, total, fmt.Sprintf("W8 %s each way: %s", formatBytes(uint64(n)), form.Title))
			r, ok, err := measureW8Form(s, f, form, cfg, prog)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("%s %s: %w", formatBytes(uint64(n)), form.ID, err), f.close())
			}
			if ok {
				rows = append(rows, r)
			}
		}
		if err := f.close(); err != nil {
			return nil, err
		}
	}
	judgeW8(rows, peers, s.Kind == deviceCUDA)
	return rows, nil
}

// measureW8Form prepares one form, runs W8Warmup unmeasured and W8Steps
// measured steps, checks the last output against the CPU and summarizes.
func measureW8Form(s *session, f *w8Fixture, form w8Form, cfg benchConfig, prog *progress) (r w8Row, ok bool, err error) {
	body, ok, err := prepareW8Form(form.ID, f, s.drv)
	if err != nil || !ok {
		return w8Row{}, false, err
	}
	defer func() { err = errors.Join(err, body.close()) }()
	rc := cfg
	rc.Warmup, rc.Repeats = cfg.W8Warmup, cfg.W8Steps
	m, err := repeat(s.Backend, body.step, rc, prog)
	if err != nil {
		return w8Row{}, false, err
	}
	if err := verifyW8(fmt.Sprintf("W8 %s %s", formatBytes(uint64(f.n)), form.ID), body.in, body.out()); err != nil {
		return w8Row{}, false, err
	}
	st := summarize(m.times)
	r = w8Row{
		Form: form.ID, Title: form.Title, Bytes: int64(f.n), Steps: len(m.times),
		MedianNs: st.Median.Nanoseconds(), MinNs: st.Min.Nanoseconds(), MaxNs: st.Max.Nanoseconds(),
		SyncsPerStep: perRun(m.tel, len(m.times)).SyncPoints, Verified: true,
	}
	return r, true, nil
}
