package proptest

// Dispatch steps of the core.Backend state machine: DispatchAsync of the
// built-in programs and the ways of collecting its Pending.

import (
	"errors"
	"fmt"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// builtinPrograms are the programs the dispatch steps use; each has a Go twin
// that core/sim runs.
var builtinPrograms = []*core.Program{core.ProgramFillU32(), core.ProgramCopyU32()}

// dispatchStep is DispatchAsync of ProgramFillU32 over one buffer or
// ProgramCopyU32 over two, holding them in flight until awaited.
type dispatchStep struct {
	withFault
	copy         bool
	src, dst     int // picks
	value        uint32
	timing, grid bool
}

// drawDispatch draws a fill or a copy over drawn handles, now and then timed
// or with a grid too large to launch.
func drawDispatch(src entropy) *dispatchStep {
	picks := drawPicks(src, 2)
	return &dispatchStep{copy: chance(src, 50), src: picks[0], dst: picks[1], value: uint32(src.intn(1 << 30)),
		timing: chance(src, 30), grid: chance(src, 10)}
}

func (s *dispatchStep) setFault(f *faultSpec) { s.f = f }
func (s *dispatchStep) String() string {
	return fmt.Sprintf("dispatch(copy=%v src=%d dst=%d value=%#x timing=%v grid=%v)%s", s.copy, s.src, s.dst, s.value, s.timing, s.grid, s.faultString())
}

func (s *dispatchStep) run(r *runner) error {
	const call = "DispatchAsync"
	dst := r.pick(s.dst)
	d := &dispatch{fill: !s.copy, value: s.value, dst: dst.ID, n: max(dst.Len, 0) / 4 * 4, timing: s.timing}
	prog, bufs, cfg := builtinPrograms[0], []core.Buffer{dst}, core.DispatchConfig{Scalars: []uint32{s.value}, Timing: s.timing}
	var want core.Kind
	if s.copy {
		srcH := r.pick(s.src)
		d.src = srcH.ID
		prog, bufs, cfg.Scalars = builtinPrograms[1], []core.Buffer{srcH, dst}, nil
		if srcH.Len < d.n {
			want = core.KindInvalidArgument // checked before the handles
		}
	}
	if s.grid {
		cfg.Grid = core.MaxGridBlocks + 1
		want = core.KindInvalidArgument
	}
	if want == 0 {
		for _, h := range bufs {
			if !r.m.valid(h) {
				want = core.KindUnknownHandle
			}
		}
	}
	r.logf("%s(%s, %v, %+v)", call, prog.Name(), bufs, cfg)
	p, err := r.b.DispatchAsync(prog, bufs, cfg)
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if p != nil {
			return fmt.Errorf("failed %s returned a Pending", call)
		}
		if out == rejected {
			return r.noCalls(call + " rejected")
		}
		// A driver failure after the launch was queued drains the stream,
		// so the kernel may have run: its output bytes are unknown.
		r.m.forget(dst.ID, span{0, d.n})
		for _, h := range bufs {
			r.failedTargets(h.ID, span{})
		}
		r.failedTargets(dst.ID, span{0, d.n})
		return nil
	}
	d.p = p
	for _, h := range bufs {
		d.ids = append(d.ids, h.ID)
		r.m.bufs[h.ID].dispN++
	}
	r.m.disp = append(r.m.disp, d)
	r.m.tel.KernelLaunches++
	if _, err := p.DeviceTime(); !errors.Is(err, core.ErrInvalidArgument) {
		return fmt.Errorf("DeviceTime before the work finished: %v, want ErrInvalidArgument", err)
	}
	// Queued without waiting: a launch, no synchronization.
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpLaunch: 1, sim.OpStreamSynchronize: 0, sim.OpEventSynchronize: 0,
		sim.OpEventRecord: map[bool]uint64{false: 1, true: 3}[s.timing]})
}

// awaitStep collects a dispatch's Pending with Await (how 0), IsReady (1),
// Close (2) or AwaitInto (3); settled ones too, which must answer the same
// as when they settled, without touching the device.
type awaitStep struct {
	withFault
	pick, how int
}

func (s *awaitStep) setFault(f *faultSpec) { s.f = f }
func (s *awaitStep) String() string {
	return fmt.Sprintf("await(%d how=%d)%s", s.pick, s.how, s.faultString())
}

// awaitCalls names the Pending method of each awaitStep.how.
var awaitCalls = [...]string{"Await", "IsReady", "Close", "AwaitInto"}

func (s *awaitStep) run(r *runner) error {
	if len(r.m.disp) == 0 {
		return nil
	}
	d := r.m.disp[s.pick%len(r.m.disp)]
	if q := r.m.queued(); len(q) > 0 && s.pick%4 != 3 {
		d = q[s.pick%len(q)] // mostly one still queued
	}
	call := awaitCalls[s.how]
	r.logf("Pending.%s (settled=%v)", call, d.settled)
	var err error
	var ready bool
	switch s.how {
	case 0:
		err = d.p.Await()
	case 1:
		ready, err = d.p.IsReady()
	case 2:
		err = d.p.Close()
	default:
		var out [][]byte
		out, err = d.p.AwaitInto(make([][]byte, 2, 3))
		if err == nil && len(out) != 0 {
			return fmt.Errorf("AwaitInto of a dispatch without reads returned %d slots", len(out))
		}
	}
	if d.settled {
		// Collected work answers as it settled: Close says nil, the others
		// repeat the failure, and nothing touches the device.
		want := d.err
		if s.how == 2 {
			want = nil
		}
		if (err == nil) != (want == nil) || err != nil && !errors.Is(err, core.ErrDriver) {
			return fmt.Errorf("Pending.%s of settled work returned %v, want %v", call, err, want)
		}
		if s.how == 1 && !ready {
			return fmt.Errorf("IsReady of settled work reported not ready")
		}
		return r.noCalls("Pending." + call + " of settled work")
	}
	if s.how == 1 && !ready {
		return fmt.Errorf("IsReady reported not ready; the simulated device completes work when queried")
	}
	// A Pending's errors name the Pending method called.
	out, verr := r.judge("Pending."+call, err, 0)
	if verr != nil {
		return verr
	}
	if out == faulted {
		r.m.settle(d, false, err)
		for _, id := range d.ids {
			r.failedTargets(id, span{})
		}
		r.failedTargets(d.dst, span{0, d.n})
		return nil
	}
	r.m.settle(d, true, nil)
	elapsed := map[bool]uint64{false: 0, true: 1}[d.timing]
	if s.how == 1 {
		if err := r.expectTransfer("Pending.IsReady", map[sim.Op]uint64{sim.OpEventQuery: 1, sim.OpStreamSynchronize: 0, sim.OpEventElapsed: elapsed}); err != nil {
			return err
		}
	} else {
		r.m.tel.SyncPoints++
		if err := r.expectTransfer("Pending."+call, map[sim.Op]uint64{sim.OpStreamSynchronize: 1, sim.OpEventElapsed: elapsed}); err != nil {
			return err
		}
	}
	if d.timing {
		if t, err := d.p.DeviceTime(); err != nil || t <= 0 {
			return fmt.Errorf("DeviceTime after the work finished: %v, %v", t, err)
		}
	} else if _, err := d.p.DeviceTime(); !errors.Is(err, core.ErrInvalidArgument) {
		return fmt.Errorf("DeviceTime without timing: %v, want ErrInvalidArgument", err)
	}
	return r.audit(d.dst)
}
