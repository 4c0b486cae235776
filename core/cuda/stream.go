package cuda

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// StreamCreate creates a non-blocking stream, so work on it never
// synchronizes with the legacy null stream.
func (d *Driver) StreamCreate() (driver.Stream, error) {
	s, err := get(d, "cuStreamCreate", func() (cudaapi.Stream, error) {
		return cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	})
	return driver.Stream(s), err
}

// StreamDestroy destroys a stream.
func (d *Driver) StreamDestroy(s driver.Stream) error {
	return d.onStream("cuStreamDestroy", s, cudaapi.StreamDestroy)
}

// StreamSynchronize waits for all work queued on s. It polls a completion
// mark queued behind that work where it can (marks.go), and otherwise
// blocks in cuStreamSynchronize.
func (d *Driver) StreamSynchronize(s driver.Stream) error {
	if d != nil && d.marks != nil && s != 0 && !d.marks.off.Load() {
		if handled, err := d.syncByMark(d.marks, s); handled {
			return err
		}
	}
	return d.onStream("cuStreamSynchronize", s, cudaapi.StreamSynchronize)
}

// onStream runs the driver call f on s, refusing the legacy null stream.
func (d *Driver) onStream(call string, s driver.Stream, f func(cudaapi.Stream) error) error {
	if s == 0 {
		return nullStream(call)
	}
	return d.do(call, func() error { return f(cudaapi.Stream(s)) })
}

// StreamQuery reports whether all work queued on s has completed.
func (d *Driver) StreamQuery(s driver.Stream) (bool, error) {
	if s == 0 {
		return false, nullStream("cuStreamQuery")
	}
	return d.query("cuStreamQuery", func() error { return cudaapi.StreamQuery(cudaapi.Stream(s)) })
}

// queryResult maps a query's CUDA_ERROR_NOT_READY to "not done".
func queryResult(call string, err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	var r cudaapi.Result
	if errors.As(err, &r) && r == cudaapi.CUDA_ERROR_NOT_READY {
		return false, nil
	}
	return false, callError(call, err)
}

// StreamWaitEvent makes future work on s wait for e.
func (d *Driver) StreamWaitEvent(s driver.Stream, e driver.Event) error {
	if s == 0 {
		return nullStream("cuStreamWaitEvent")
	}
	if e == 0 {
		return refused("cuStreamWaitEvent", "null event", "pass an event from EventCreate")
	}
	return d.do("cuStreamWaitEvent", func() error {
		return cudaapi.StreamWaitEvent(cudaapi.Stream(s), cudaapi.Event(e), 0)
	})
}

// EventCreate creates an event; without timing it is created with
// CU_EVENT_DISABLE_TIMING, the cheaper kind to record and query.
func (d *Driver) EventCreate(timing bool) (driver.Event, error) {
	flags := uint32(cudaapi.CU_EVENT_DISABLE_TIMING)
	if timing {
		flags = cudaapi.CU_EVENT_DEFAULT
	}
	e, err := get(d, "cuEventCreate", func() (cudaapi.Event, error) { return cudaapi.EventCreate(flags) })
	return driver.Event(e), err
}

// EventRecord records e at the current end of s.
func (d *Driver) EventRecord(e driver.Event, s driver.Stream) error {
	if e == 0 {
		return refused("cuEventRecord", "null event", "pass an event from EventCreate")
	}
	if s == 0 {
		return nullStream("cuEventRecord")
	}
	return d.do("cuEventRecord", func() error { return cudaapi.EventRecord(cudaapi.Event(e), cudaapi.Stream(s)) })
}

// EventQuery reports whether the work before e has completed.
func (d *Driver) EventQuery(e driver.Event) (bool, error) {
	if e == 0 {
		return false, refused("cuEventQuery", "null event", "pass an event from EventCreate")
	}
	return d.query("cuEventQuery", func() error { return cudaapi.EventQuery(cudaapi.Event(e)) })
}

// EventSynchronize waits for the work before e.
func (d *Driver) EventSynchronize(e driver.Event) error {
	return d.onEvent("cuEventSynchronize", e, cudaapi.EventSynchronize)
}

// EventDestroy destroys an event.
func (d *Driver) EventDestroy(e driver.Event) error {
	return d.onEvent("cuEventDestroy", e, cudaapi.EventDestroy)
}

// onEvent runs the driver call f on e, refusing a null event.
func (d *Driver) onEvent(call string, e driver.Event, f func(cudaapi.Event) error) error {
	if e == 0 {
		return refused(call, "null event", "pass an event from EventCreate")
	}
	return d.do(call, func() error { return f(cudaapi.Event(e)) })
}

// EventElapsed returns the device time between two completed timing events.
func (d *Driver) EventElapsed(start, end driver.Event) (time.Duration, error) {
	const call = "cuEventElapsedTime"
	if start == 0 || end == 0 {
		return 0, refused(call, "null event", "pass two timing events from EventCreate(true)")
	}
	var ms float32
	err := d.do(call, func() error {
		var err error
		ms, err = cudaapi.EventElapsedTime(cudaapi.Event(start), cudaapi.Event(end))
		return err
	})
	if err != nil {
		return 0, err
	}
	if math.IsNaN(float64(ms)) || math.IsInf(float64(ms), 0) {
		return 0, &errs.Error{Op: call, Kind: errs.KindDriver, Code: cudaapi.CUDA_ERROR_UNKNOWN, Err: cudaapi.CUDA_ERROR_UNKNOWN,
			Detail: fmt.Sprintf("returned %v ms", ms), Fix: "record both events on the same device before asking for the time"}
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
