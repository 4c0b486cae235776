package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
)

// launchWords is the element count of W5's tiny buffers.
const launchWords = 64

// W5: one Backend.Run of a Batch of Launches dependent vadd launches, each
// adding one to what the previous launch wrote (ping-ponging between two
// buffers), so the batch has exactly one fence. Cleanup reads the result and
// checks it against a CPU model of every run, so the timing cannot be of work
// that was silently skipped.
func prepareLaunches(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	hs, err := allocMany(b, 3, 4*launchWords)
	if err != nil {
		return nil, nil, err
	}
	p, q, one := hs[0], hs[1], hs[2]
	ones := make([]byte, 4*launchWords)
	for i := 0; i < launchWords; i++ {
		binary.LittleEndian.PutUint32(ones[4*i:], 1)
	}
	if err := b.UploadResidentMany([]core.Upload{{Buf: p, Data: make([]byte, 4*launchWords)}, {Buf: one, Data: ones}}); err != nil {
		return nil, nil, errors.Join(err, freeAll(b, hs))
	}
	vadd := core.ProgramVAddU32()
	batch := core.Batch{Steps: make([]core.Step, cfg.Launches)}
	for i := range batch.Steps {
		src, dst := p, q
		if i%2 == 1 {
			src, dst = q, p
		}
		batch.Steps[i] = core.Step{Program: vadd, Bufs: []core.Buffer{src, one, dst}}
	}
	last := q
	if cfg.Launches%2 == 0 {
		last = p
	}
	// The CPU's model of p and q, advanced by every run that succeeded.
	var pv, qv uint32
	runs := 0
	body := func() error {
		if _, err := b.Run(batch, nil); err != nil {
			return err
		}
		for i := 0; i < cfg.Launches; i++ {
			if i%2 == 0 {
				qv = pv + 1
			} else {
				pv = qv + 1
			}
		}
		runs++
		return nil
	}
	cleanup := func() error {
		got, err := b.DownloadResident(last)
		if err == nil {
			want := make([]uint32, launchWords)
			for i := range want {
				want[i] = pv
				if last == q {
					want[i] = qv
				}
			}
			if verr := verifyWords("W5 result", got, want); verr != nil {
				err = fmt.Errorf("%w (after %d runs of %d launches)", verr, runs, cfg.Launches)
			}
		}
		return errors.Join(err, freeAll(b, hs))
	}
	return body, cleanup, nil
}
