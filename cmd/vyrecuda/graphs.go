package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/vyre-go/vyrecuda/core"
)

// graphWorkload builds the workloads replayed from or timing CUDA graphs:
// W1G, W3G, W5G and W5C.
func graphWorkload(id string, cfg benchConfig) workload {
	small := formatBytes(uint64(cfg.Small))
	switch id {
	case "W1G":
		return workload{
			ID: id, Title: fmt.Sprintf("W1's upload replayed from a CUDA graph (%d x %s)", cfg.Count, small),
			Bytes: int64(cfg.Count) * int64(cfg.Small), Ops: cfg.Count,
			Target:  target{Text: "<= 150 us", MaxRun: 150 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareGraphUpload(b, cfg) },
		}
	case "W3G":
		return workload{
			ID: id, Title: fmt.Sprintf("W3's readback replayed from a CUDA graph (%d x %s)", cfg.Count, small),
			Bytes: int64(cfg.Count) * int64(cfg.Small), Ops: cfg.Count,
			Target:  target{Text: "<= 150 us", MaxRun: 150 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareGraphReadback(b, cfg) },
		}
	case "W5G":
		return workload{
			ID: id, Title: fmt.Sprintf("%d dependent tiny launches replayed from a CUDA graph + 1 fence", cfg.Launches),
			Ops:     cfg.Launches,
			Target:  target{Text: "<= 100 us", MaxRun: 100 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareGraphLaunches(b, cfg) },
		}
	default: // W5C
		return workload{
			ID: id, Title: fmt.Sprintf("capture of W5's %d launches into a CUDA graph", cfg.Launches),
			Ops:     1,
			Target:  target{Text: "<= 2 ms", MaxRun: 2 * time.Millisecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareCapture(b, cfg) },
		}
	}
}

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

// W1G: W1's upload captured once (Backend.Capture), then one Graph.Replay
// per run: the replay packs the current bytes of every upload into the
// graph's staging and launches the recorded DMA and scatter. Each run
// changes one upload's bytes first, and cleanup reads every buffer back
// and compares, so a replay that moved stale bytes fails the bench.
func prepareGraphUpload(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	hs, err := allocMany(b, cfg.Count, cfg.Small)
	if err != nil {
		return nil, nil, err
	}
	ups := make([]core.UploadAt, len(hs))
	for i, h := range hs {
		ups[i] = core.UploadAt{Buf: h, Data: pattern(cfg.Small, uint32(i))}
	}
	g, err := b.Capture(core.Batch{Uploads: ups})
	if err != nil {
		return nil, nil, errors.Join(err, freeAll(b, hs))
	}
	run := 0
	body := func() error {
		ups[run%len(ups)].Data[0]++
		run++
		_, err := g.Replay(nil)
		return err
	}
	cleanup := func() error {
		err := g.Close()
		if err == nil {
			err = checkUploads(b, ups)
		}
		return errors.Join(err, freeAll(b, hs))
	}
	return body, cleanup, nil
}

// checkUploads reads every upload's buffer back and compares it with the
// upload's bytes.
func checkUploads(b *core.Backend, ups []core.UploadAt) error {
	rs := make([]core.Range, len(ups))
	for i, u := range ups {
		rs[i] = core.Range{Buf: u.Buf, Offset: u.Offset, Len: len(u.Data)}
	}
	got, err := b.DownloadMany(rs, nil)
	if err != nil {
		return err
	}
	for i, u := range ups {
		if !bytes.Equal(got[i], u.Data) {
			return fmt.Errorf("upload %d: the device holds other bytes than the last replay moved", i)
		}
	}
	return nil
}

// W3G: W3's readback captured once, then one Graph.Replay per run into
// reused slots: the recorded gather and DMA, then the unpack into the
// slots. The last run's slots are compared with what was uploaded.
func prepareGraphReadback(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	hs, ups, err := uploadedBuffers(b, cfg)
	if err != nil {
		return nil, nil, err
	}
	g, err := b.Capture(core.Batch{Reads: wholeRanges(hs)})
	if err != nil {
		return nil, nil, errors.Join(err, freeAll(b, hs))
	}
	var dst [][]byte
	body := func() (err error) {
		dst, err = g.Replay(dst)
		return err
	}
	cleanup := func() error {
		err := g.Close()
		for i, u := range ups {
			if err == nil && (len(dst) != len(ups) || !bytes.Equal(dst[i], u.Data)) {
				err = fmt.Errorf("read %d: the replay returned other bytes than the buffer holds", i)
			}
		}
		return errors.Join(err, freeAll(b, hs))
	}
	return body, cleanup, nil
}
