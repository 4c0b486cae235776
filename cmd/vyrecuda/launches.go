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
	l, err := newLaunchChain(b, cfg)
	if err != nil {
		return nil, nil, err
	}
	body := func() error {
		if _, err := b.Run(l.batch, nil); err != nil {
			return err
		}
		l.advance()
		return nil
	}
	return body, l.cleanup, nil
}

// launchChain is W5's buffers and batch, with a CPU model of the two
// ping-pong buffers advanced by every run that succeeded.
type launchChain struct {
	b      *core.Backend
	cfg    benchConfig
	hs     []core.Buffer
	batch  core.Batch
	last   core.Buffer
	pv, qv uint32
	runs   int
}

// newLaunchChain allocates W5's buffers (p zeroed, one filled with ones) and
// builds its batch.
func newLaunchChain(b *core.Backend, cfg benchConfig) (*launchChain, error) {
	hs, err := allocMany(b, 3, 4*launchWords)
	if err != nil {
		return nil, err
	}
	p, q, one := hs[0], hs[1], hs[2]
	ones := make([]byte, 4*launchWords)
	for i := 0; i < launchWords; i++ {
		binary.LittleEndian.PutUint32(ones[4*i:], 1)
	}
	if err := b.Upload(core.UploadAt{Buf: p, Data: make([]byte, 4*launchWords)}, core.UploadAt{Buf: one, Data: ones}); err != nil {
		return nil, errors.Join(err, freeAll(b, hs))
	}
	vadd := core.ProgramVAddU32()
	l := &launchChain{b: b, cfg: cfg, hs: hs, batch: core.Batch{Steps: make([]core.Step, cfg.Launches)}, last: q}
	for i := range l.batch.Steps {
		src, dst := p, q
		if i%2 == 1 {
			src, dst = q, p
		}
		l.batch.Steps[i] = core.Step{Program: vadd, Bufs: []core.Buffer{src, one, dst}}
	}
	if cfg.Launches%2 == 0 {
		l.last = p
	}
	return l, nil
}

// advance applies one successful run to the CPU model.
func (l *launchChain) advance() {
	for i := 0; i < l.cfg.Launches; i++ {
		if i%2 == 0 {
			l.qv = l.pv + 1
		} else {
			l.pv = l.qv + 1
		}
	}
	l.runs++
}

// cleanup checks the last buffer against the model and frees everything.
func (l *launchChain) cleanup() error {
	got, err := l.b.Download(l.last.All(), nil)
	if err == nil {
		want := make([]uint32, launchWords)
		for i := range want {
			want[i] = l.pv
			if l.last == l.hs[1] {
				want[i] = l.qv
			}
		}
		if verr := verifyWords("W5 result", got, want); verr != nil {
			err = fmt.Errorf("%w (after %d runs of %d launches)", verr, l.runs, l.cfg.Launches)
		}
	}
	return errors.Join(err, freeAll(l.b, l.hs))
}
