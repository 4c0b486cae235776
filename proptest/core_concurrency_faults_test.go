package proptest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// sharedState is what the goroutines of TestCoreConcurrentFaults share: a
// few Backend buffers and dispatcher buffers of known content that every
// goroutine reads, one of each a further goroutine frees while they do.
type sharedState struct {
	b      *core.Backend
	d      *core.OptimizerDispatcher
	bufs   []core.Buffer
	dbufs  []core.Buffer // the dispatcher's
	data   [][]byte      // content of bufs[i] and dbufs[i]
	freedB atomic.Bool
	freedD atomic.Bool
	// Set before the first free of each victim is tried.
	tryB, tryD atomic.Bool
}

// sharedStep reads a shared buffer through one of several calls;
// with faults at random and a victim being freed, a call may fail, but only
// with a driver error (a fault), or ErrUnknownHandle for the victim; when it
// succeeds the bytes are the known ones.
type sharedStep struct {
	sh        *sharedState
	api, pick int
}

func (s *sharedStep) String() string { return fmt.Sprintf("shared(api=%d pick=%d)", s.api, s.pick) }

func (s *sharedStep) run(r *runner) error {
	sh := s.sh
	i := s.pick % len(sh.bufs)
	h, dh, want := sh.bufs[i], sh.dbufs[i], sh.data[i]
	victim := &sh.tryB // whose free may make the handle unknown
	var (
		got  [][]byte
		err  error
		call string
	)
	switch s.api {
	case 0:
		call = "Download"
		var one []byte
		one, err = sh.b.Download(h.All(), nil)
		got = [][]byte{one}
	case 1:
		call = "Run"
		got, err = sh.b.Run(core.Batch{Reads: []core.Range{{Buf: h, Len: h.Len}, {Buf: h, Offset: 1, Len: h.Len - 1}}}, nil)
		if err == nil {
			if len(got) != 2 || !bytes.Equal(got[1], want[1:]) {
				return fmt.Errorf("Run read of a shared buffer at offset 1: wrong bytes")
			}
			got = got[:1]
		}
	case 2:
		call = "RunAsync"
		var p *core.Pending
		p, err = sh.b.RunAsync(core.Batch{Reads: []core.Range{{Buf: h, Len: h.Len}}})
		if err == nil {
			got, err = p.AwaitInto(nil)
			if cerr := p.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	case 3:
		call = "Download of a dispatcher buffer"
		var one []byte
		one, err = sh.b.Download(dh.All(), nil)
		got = [][]byte{one}
		victim = &sh.tryD
	default:
		call = "Run of a dispatcher buffer"
		got, err = sh.b.Run(core.Batch{Reads: []core.Range{dh.All()}}, nil)
		victim = &sh.tryD
	}
	if err != nil {
		var e *core.Error
		switch {
		case !errors.As(err, &e) || e.Fix == "":
			return fmt.Errorf("%s of a shared buffer: %v is not a *core.Error with a fix", call, err)
		case e.Kind == core.KindDriver:
			return nil // a random fault
		case e.Kind == core.KindUnknownHandle && i == 0 && victim.Load():
			return nil // the victim was freed
		}
		return fmt.Errorf("%s of a shared buffer failed: %v", call, err)
	}
	if len(got) != 1 || !bytes.Equal(got[0], want) {
		return fmt.Errorf("%s of a shared buffer returned other bytes than it holds", call)
	}
	return nil
}

// TestCoreConcurrentFaults runs the concurrent property with random driver
// faults (drawn rate and code), with optimizer steps (each goroutine its own
// dispatcher on the shared Backend), and with shared handles: buffers and
// ids of one shared dispatcher that every goroutine reads while one more
// goroutine frees one of each. Each goroutine's own buffers are checked
// against its model as in TestCoreConcurrent; reads of shared ones return
// their bytes or fail only with a fault, or as unknown once freed; the
// victims free exactly once, refused only as in flight (or by a fault)
// before that; and once faults stop, every dispatcher and the Backend close
// with nothing left on the device.
func TestCoreConcurrentFaults(t *testing.T) {
	seed := coreSeed(t)
	rounds, steps := 2, 50
	if coreLong() {
		rounds, steps = 40, 300
	}
	const workers = 4
	fs, err := newForeign()
	require.NoError(t, err)
	stats := snapshotCoreStats()
	for round := range rounds {
		rng := rand.New(rand.NewSource(seed + int64(round)))
		cfg := drawConfig(randEntropy{rng}, faultsRandom)
		dev := cfg.device()
		log := new(logCounter)
		b, err := core.Open(dev, cfg.options(log)...)
		require.NoError(t, err)
		sh := newShared(t, b, rng)
		coreStats.sequences.Add(workers)
		dev.FailRateWith(cfg.rateSeed, cfg.rate, cfg.rateCode, randomFaultOps()...)

		runners := make([]*runner, workers)
		var wg sync.WaitGroup
		for w := range runners {
			r := newSharedRunner(cfg, dev, b, log, fs.h)
			r.cfg.faults = faultsRandom
			runners[w] = r
			src := randEntropy{rand.New(rand.NewSource(seed*1000 + int64(round*workers+w)))}
			kinds := stepKinds{async: w == 0, optimizer: w > 0}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range steps {
					var s step = &sharedStep{sh: sh, api: src.intn(5), pick: src.intn(1 << 20)}
					if !chance(src, 20) {
						s = drawStep(src, kinds)
					}
					if r.do(s) != nil {
						return
					}
				}
			}()
		}
		victimErrs := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			victimErrs <- sh.freeVictims(steps)
		}()
		wg.Wait()
		require.NoError(t, <-victimErrs, "round %d", round)
		for w, r := range runners {
			require.NoError(t, r.broken, "round %d (config %v) goroutine %d", round, cfg, w)
		}
		dev.ClearFaults()
		for _, r := range runners {
			require.NoError(t, r.settleAll(), "round %d", round)
			for id := range r.m.bufs {
				require.NoError(t, r.audit(id), "round %d", round)
			}
			if r.opt != nil {
				require.NoError(t, r.opt.d.Close(), "round %d: a goroutine's OptimizerDispatcher.Close", round)
			}
		}
		require.NoError(t, sh.d.Close(), "round %d: the shared OptimizerDispatcher.Close", round)
		require.NoError(t, b.Close(), "round %d", round)
		require.True(t, sim.RequireNoLeaks(t, dev), "round %d (config %v)", round, cfg)
	}
	require.NoError(t, fs.close())
	logCoreStats(t, stats)
}

// newShared makes the shared buffers, before faults are armed.
func newShared(t *testing.T, b *core.Backend, rng *rand.Rand) *sharedState {
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	sh := &sharedState{b: b, d: d}
	for i := range 3 {
		n := 1 << (6 + rng.Intn(8))
		data := patternData(rng.Intn(1<<16), n)
		h, err := b.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
		dh, err := d.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: dh, Data: data}))
		sh.bufs, sh.dbufs, sh.data = append(sh.bufs, h), append(sh.dbufs, dh), append(sh.data, data)
		_ = i
	}
	return sh
}

// freeVictims frees shared buffer 0 and the dispatcher's buffer 0 while the
// goroutines read them:
// each free succeeds once, and before that is refused only as in flight or
// by a fault; a second free is refused as unknown.
func (sh *sharedState) freeVictims(tries int) error {
	check := func(what string, err error) (bool, error) {
		var e *core.Error
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &e) && (e.Kind == core.KindInFlight || e.Kind == core.KindDriver):
			return false, nil
		}
		return false, fmt.Errorf("%s of a shared victim: %v", what, err)
	}
	for range tries * 4 {
		if !sh.freedB.Load() {
			sh.tryB.Store(true)
			ok, err := check("Free", sh.b.Free(sh.bufs[0]))
			if err != nil {
				return err
			}
			sh.freedB.Store(ok)
		}
		if !sh.freedD.Load() {
			sh.tryD.Store(true)
			ok, err := check("the dispatcher's Free", sh.d.Free(sh.dbufs[0]))
			if err != nil {
				return err
			}
			sh.freedD.Store(ok)
		}
		if sh.freedB.Load() && sh.freedD.Load() {
			break
		}
		runtime.Gosched()
	}
	if sh.freedB.Load() {
		if err := sh.b.Free(sh.bufs[0]); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("second Free of the victim: %v, want ErrUnknownHandle", err)
		}
	}
	if sh.freedD.Load() {
		if err := sh.d.Free(sh.dbufs[0]); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("second dispatcher Free of the victim: %v, want ErrUnknownHandle", err)
		}
	}
	return nil
}
