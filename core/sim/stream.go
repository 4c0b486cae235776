package sim

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The simulated clock's cost model: every executed operation advances device
// time by a fixed overhead plus its bytes over a bandwidth, roughly an H100
// over PCIe. Times are deterministic: they depend only on what executed and
// in which order, never on the host's wall clock.
const (
	CopyOverhead     = 2 * time.Microsecond // per copy or memset
	LaunchOverhead   = 4 * time.Microsecond // per kernel launch
	EventOverhead    = 1 * time.Microsecond // per event record or stream wait
	HostBytesPerNs   = 50                   // H2D and D2H: 50 GB/s
	DeviceBytesPerNs = 1000                 // D2D and memset: 1 TB/s
)

// op is one unit of queued work. An op runs at most once, when its stream is
// synchronized or queried, or when an event recorded after it is.
type op struct {
	kind   Op
	stream *stream
	cost   time.Duration
	run    func(d *Device) *Error // nil for an event record
	// ready, when set, reports whether run can execute without waiting for
	// work another goroutine has not queued yet (a collective part whose
	// ranks have not all queued theirs); queries leave such an op queued.
	ready func() bool
	// relaunch, set on a collective part recorded by a stream capture,
	// queues a new part of that collective on a stream each time the
	// graph is launched (collective_exec.go); such an op never runs itself.
	relaunch func(st *stream)
	done     bool
	at       time.Duration // device time when it finished (event records)
}

type stream struct {
	dev     *Device // the device the stream belongs to
	handle  driver.Stream
	queue   []*op
	err     *Error   // first execution failure not yet reported
	running bool     // executing now; guards against dependency cycles
	capture *capture // the recording in progress, or nil (graph.go)
}

type event struct {
	handle driver.Event
	timing bool
	rec    *op // the latest EventRecord; nil if never recorded
	// captured is the capture the latest record was made in, or nil: such
	// a record marks no work the host can wait for (graph.go).
	captured *capture
}

// refuseCaptured fails o on an event recorded inside a stream capture,
// invalidating that capture if it is still recording.
func refuseCaptured(o Op, ev *event) error {
	c := ev.captured
	if c == nil {
		return nil
	}
	e := fail(o, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
		"event 0x%x was recorded inside a stream capture; only events recorded outside one can be waited for", uintptr(ev.handle))
	if c.invalid == nil {
		c.invalid = e
	}
	return e
}

func (s *stream) fault(e *Error) {
	if s.err == nil {
		s.err = e
	}
}

// lookupStream resolves s for op, refusing the legacy null stream and
// unknown or destroyed streams with CUDA_ERROR_INVALID_HANDLE.
func (d *Device) lookupStream(o Op, s driver.Stream) (*stream, error) {
	if s == 0 {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE,
			"stream 0 is the legacy null stream; use a stream from StreamCreate")
	}
	st, ok := d.streams[s]
	if !ok {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "stream 0x%x is unknown or destroyed", uintptr(s))
	}
	return st, nil
}

func (d *Device) lookupEvent(o Op, e driver.Event) (*event, error) {
	ev, ok := d.events[e]
	if !ok || e == 0 {
		return nil, fail(o, cudaapi.CUDA_ERROR_INVALID_HANDLE, "event 0x%x is unknown or destroyed", uintptr(e))
	}
	return ev, nil
}

// lookupPeerEvent resolves e among d's events and, for a Device of a
// Machine, among the events of the other devices there (CUDA lets a stream
// wait on another device's event).
func (d *Device) lookupPeerEvent(o Op, e driver.Event) (*event, error) {
	if ev, ok := d.events[e]; ok && e != 0 {
		return ev, nil
	}
	if e != 0 {
		for _, p := range d.machine.devs {
			if ev, ok := p.events[e]; ok {
				return ev, nil
			}
		}
	}
	return d.lookupEvent(o, e)
}

func (d *Device) enqueue(st *stream, o *op) {
	o.stream = st
	if st.capture != nil {
		st.capture.ops = append(st.capture.ops, o)
		return
	}
	st.queue = append(st.queue, o)
	d.queued++
}

// runStream executes st's queued work in order, up to and including until
// (all of it when until is nil or not on st). Execution errors are kept on
// the stream until reported.
//
// The stream may belong to another device of d's Machine (a wait on a
// peer's event); its own device executes and counts the work.
func (d *Device) runStream(st *stream, until *op) {
	d = st.dev
	if st.running {
		// Unreachable through the Driver API (a wait can only name work
		// queued before it), but never loop or recurse forever.
		st.fault(fail(OpStreamWaitEvent, cudaapi.CUDA_ERROR_ILLEGAL_STATE, "cyclic stream dependency"))
		return
	}
	st.running = true
	defer func() { st.running = false }()
	for len(st.queue) > 0 {
		o := st.queue[0]
		if d.machine.polling && o.ready != nil && !o.ready() {
			break // a query never waits for another rank
		}
		st.queue[0] = nil
		st.queue = st.queue[1:]
		d.queued--
		d.execute(o)
		if o == until {
			break
		}
	}
	if len(st.queue) == 0 {
		st.queue = nil
	}
}

func (d *Device) execute(o *op) {
	if o.run != nil {
		if err := o.run(d); err != nil {
			o.stream.fault(err)
		}
	}
	d.clock += o.cost
	o.done = true
	o.at = d.clock
}

// takeErr reports and clears st's pending execution failure as a failure of
// the operation that observed it.
func (st *stream) takeErr(o Op) error {
	e := st.err
	if e == nil {
		return nil
	}
	st.err = nil
	return fail(o, e.Code, "queued %s failed: %s", e.Op, e.Detail)
}

// StreamCreate creates a non-blocking stream.
func (d *Device) StreamCreate() (driver.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpStreamCreate); done {
		return 0, err
	}
	h := driver.Stream(d.newHandle())
	d.streams[h] = &stream{dev: d, handle: h}
	return h, nil
}

// StreamDestroy destroys a stream. A stream with queued, unexecuted work is
// refused with CUDA_ERROR_ILLEGAL_STATE (synchronize it first): the
// simulated device never runs work nobody waited for. An unreported
// execution failure on the stream, and a capture in progress, are dropped
// with it.
func (d *Device) StreamDestroy(s driver.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpStreamDestroy); done {
		return err
	}
	st, err := d.lookupStream(OpStreamDestroy, s)
	if err != nil {
		return err
	}
	if n := len(st.queue); n > 0 {
		return fail(OpStreamDestroy, cudaapi.CUDA_ERROR_ILLEGAL_STATE,
			"stream 0x%x has %d queued operations; synchronize it before destroying it", uintptr(s), n)
	}
	delete(d.streams, s)
	return nil
}

// StreamSynchronize executes all work queued on s (and, through
// StreamWaitEvent, the work it depends on on other streams), then reports
// the first execution failure on s since it was last reported.
func (d *Device) StreamSynchronize(s driver.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpStreamSynchronize); done {
		return err
	}
	st, err := d.lookupStream(OpStreamSynchronize, s)
	if err != nil {
		return err
	}
	if err := refuseCapturing(OpStreamSynchronize, st); err != nil {
		return err
	}
	d.runStream(st, nil)
	return st.takeErr(OpStreamSynchronize)
}

// StreamQuery behaves like StreamSynchronize and then reports done: the
// simulated device completes work exactly when someone looks, so results
// never depend on timing. Two exceptions report the stream unfinished,
// leaving work queued: a collective part whose communicator waits for a
// rank that has not queued its part yet (a query never blocks), and any
// queued work while HoldQueries is on.
func (d *Device) StreamQuery(s driver.Stream) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpStreamQuery); done {
		return false, err
	}
	st, err := d.lookupStream(OpStreamQuery, s)
	if err != nil {
		return false, err
	}
	if err := refuseCapturing(OpStreamQuery, st); err != nil {
		return false, err
	}
	if d.holdQueries && len(st.queue) > 0 {
		return false, nil
	}
	d.machine.polling = true
	d.runStream(st, nil)
	d.machine.polling = false
	if err := st.takeErr(OpStreamQuery); err != nil {
		return false, err
	}
	return len(st.queue) == 0, nil
}

// HoldQueries, while on is set, makes StreamQuery and EventQuery on d
// report queued work unfinished without executing it, as a GPU does while
// long work runs; synchronizations still execute it. Tests use it to
// exercise waits that give up, such as a context's deadline.
func (d *Device) HoldQueries(on bool) {
	d.mu.Lock()
	d.holdQueries = on
	d.mu.Unlock()
}

// StreamWaitEvent makes work queued on s after this call wait for the work
// before e's latest record: executing s first executes the recording stream
// up to that record. Waiting on a never-recorded event does nothing, as in
// CUDA.
func (d *Device) StreamWaitEvent(s driver.Stream, e driver.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpStreamWaitEvent); done {
		return err
	}
	st, err := d.lookupStream(OpStreamWaitEvent, s)
	if err != nil {
		return err
	}
	ev, err := d.lookupPeerEvent(OpStreamWaitEvent, e)
	if err != nil {
		return err
	}
	if err := refuseCapturing(OpStreamWaitEvent, st); err != nil {
		return err
	}
	if err := refuseCaptured(OpStreamWaitEvent, ev); err != nil {
		return err
	}
	rec := ev.rec
	if rec == nil || rec.done {
		return nil
	}
	d.enqueue(st, &op{kind: OpStreamWaitEvent, cost: EventOverhead, run: func(d *Device) *Error {
		if !rec.done {
			d.runStream(rec.stream, rec)
		}
		return nil
	}, ready: func() bool { return rec.done || rec.stream.readyBefore(rec) }})
	return nil
}

// readyBefore reports whether the work queued on st before until (all of
// it when until is not queued there) can execute without waiting for
// another rank (see op.ready).
func (st *stream) readyBefore(until *op) bool {
	for _, q := range st.queue {
		if q == until {
			break
		}
		if q.ready != nil && !q.ready() {
			return false
		}
	}
	return true
}

// EventCreate creates an event; timing events can be measured with
// EventElapsed.
func (d *Device) EventCreate(timing bool) (driver.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventCreate); done {
		return 0, err
	}
	h := driver.Event(d.newHandle())
	d.events[h] = &event{handle: h, timing: timing}
	return h, nil
}

// EventRecord queues a record of e at the current end of s, replacing any
// earlier record of e.
func (d *Device) EventRecord(e driver.Event, s driver.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventRecord); done {
		return err
	}
	ev, err := d.lookupEvent(OpEventRecord, e)
	if err != nil {
		return err
	}
	st, err := d.lookupStream(OpEventRecord, s)
	if err != nil {
		return err
	}
	if st.capture != nil {
		// Recorded inside a capture: it marks a point of the recording,
		// not work the host can wait for.
		ev.rec, ev.captured = nil, st.capture
		return nil
	}
	rec := &op{kind: OpEventRecord, cost: EventOverhead}
	d.enqueue(st, rec)
	ev.rec, ev.captured = rec, nil
	return nil
}

// completeEvent runs the work before ev's latest record and reports any
// execution failure of the recording stream.
func (d *Device) completeEvent(o Op, ev *event) error {
	if err := refuseCaptured(o, ev); err != nil {
		return err
	}
	rec := ev.rec
	if rec == nil {
		return nil
	}
	if !rec.done {
		d.runStream(rec.stream, rec)
	}
	return rec.stream.takeErr(o)
}

// EventQuery executes the work before e's latest record and reports done
// (never-recorded events are done, as in CUDA), with StreamQuery's
// exceptions: a collective part waiting for another rank, and HoldQueries.
func (d *Device) EventQuery(e driver.Event) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventQuery); done {
		return false, err
	}
	ev, err := d.lookupEvent(OpEventQuery, e)
	if err != nil {
		return false, err
	}
	if d.holdQueries && ev.rec != nil && !ev.rec.done && ev.captured == nil {
		return false, nil
	}
	d.machine.polling = true
	err = d.completeEvent(OpEventQuery, ev)
	d.machine.polling = false
	if err != nil {
		return false, err
	}
	return ev.rec == nil || ev.rec.done, nil
}

// EventSynchronize executes the work before e's latest record.
func (d *Device) EventSynchronize(e driver.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventSynchronize); done {
		return err
	}
	ev, err := d.lookupEvent(OpEventSynchronize, e)
	if err != nil {
		return err
	}
	return d.completeEvent(OpEventSynchronize, ev)
}

// EventElapsed returns the simulated device time between two completed
// timing events. It executes nothing: a recorded event whose work has not
// run yet gives CUDA_ERROR_NOT_READY; a non-timing or never-recorded event
// gives CUDA_ERROR_INVALID_HANDLE, as in CUDA.
func (d *Device) EventElapsed(start, end driver.Event) (time.Duration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventElapsed); done {
		return 0, err
	}
	var evs [2]*event
	for i, h := range [2]driver.Event{start, end} {
		ev, err := d.lookupEvent(OpEventElapsed, h)
		if err != nil {
			return 0, err
		}
		if err := refuseCaptured(OpEventElapsed, ev); err != nil {
			return 0, err
		}
		if !ev.timing {
			return 0, fail(OpEventElapsed, cudaapi.CUDA_ERROR_INVALID_HANDLE,
				"event 0x%x was created without timing", uintptr(h))
		}
		if ev.rec == nil {
			return 0, fail(OpEventElapsed, cudaapi.CUDA_ERROR_INVALID_HANDLE,
				"event 0x%x was never recorded", uintptr(h))
		}
		evs[i] = ev
	}
	for i, ev := range evs {
		if !ev.rec.done {
			return 0, fail(OpEventElapsed, cudaapi.CUDA_ERROR_NOT_READY,
				"event 0x%x has not completed; synchronize it first", uintptr([2]driver.Event{start, end}[i]))
		}
	}
	return evs[1].rec.at - evs[0].rec.at, nil
}

// EventDestroy destroys an event. A pending record of it still executes
// with its stream; waits already queued on it are unaffected.
func (d *Device) EventDestroy(e driver.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpEventDestroy); done {
		return err
	}
	if _, err := d.lookupEvent(OpEventDestroy, e); err != nil {
		return err
	}
	delete(d.events, e)
	return nil
}
