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
// few Backend buffers and dispatcher ids of known content that every
// goroutine reads, one of each a further goroutine frees while they do.
type sharedState struct {
	b      *core.Backend
	d      *core.OptimizerDispatcher
	bufs   []core.Buffer
	ids    []uint64
	data   [][]byte // content of bufs[i] and ids[i]
	freedB atomic.Bool
	freedD atomic.Bool
	// Set before the first free of each victim is tried.
	tryB, tryD atomic.Bool
}

// sharedStep reads a shared buffer or id through one of several calls;
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
	h, id, want := sh.bufs[i], sh.ids[i], sh.data[i]
	var (
		got  [][]byte
		err  error
		call string
	)
	switch s.api {
	case 0:
		call = "DownloadResident"
		var one []byte
		one, err = sh.b.DownloadResident(h)
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
		call = "opt.ReadResident"
		var one []byte
		one, err = sh.d.ReadResident(id)
		got = [][]byte{one}
		h.ID = 0 // the victim here is the id
	default:
		call = "opt.Run"
		got, err = sh.d.Run(core.OptBatch{Reads: []core.OptRange{{ID: id, Len: len(want)}}}, nil)
		h.ID = 0
	}
	if err != nil {
		var e *core.Error
		switch {
		case !errors.As(err, &e) || e.Fix == "":
			return fmt.Errorf("%s of a shared buffer: %v is not a *core.Error with a fix", call, err)
		case e.Kind == core.KindDriver:
			return nil // a random fault
		case e.Kind == core.KindUnknownHandle && i == 0 && (h.ID != 0 && sh.tryB.Load() || h.ID == 0 && sh.tryD.Load()):
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

// newShared makes the shared buffers and ids, before faults are armed.
func newShared(t *testing.T, b *core.Backend, rng *rand.Rand) *sharedState {
	d, err := core.NewOptimizerDispatcher(b)
	require.NoError(t, err)
	sh := &sharedState{b: b, d: d}
	for i := range 3 {
		n := 1 << (6 + rng.Intn(8))
		data := patternData(rng.Intn(1<<16), n)
		h, err := b.AllocateResident(n)
		require.NoError(t, err)
		require.NoError(t, b.UploadResident(h, data))
		id, err := d.AllocResident(n)
		require.NoError(t, err)
		require.NoError(t, d.UploadResident(id, data))
		sh.bufs, sh.ids, sh.data = append(sh.bufs, h), append(sh.ids, id), append(sh.data, data)
		_ = i
	}
	return sh
}

// freeVictims frees shared buffer 0 and id 0 while the goroutines read them:
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
			ok, err := check("FreeResident", sh.b.FreeResident(sh.bufs[0]))
			if err != nil {
				return err
			}
			sh.freedB.Store(ok)
		}
		if !sh.freedD.Load() {
			sh.tryD.Store(true)
			ok, err := check("opt.FreeResident", sh.d.FreeResident(sh.ids[0]))
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
		if err := sh.b.FreeResident(sh.bufs[0]); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("second FreeResident of the victim: %v, want ErrUnknownHandle", err)
		}
	}
	if sh.freedD.Load() {
		if err := sh.d.FreeResident(sh.ids[0]); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("second opt.FreeResident of the victim: %v, want ErrUnknownHandle", err)
		}
	}
	return nil
}
