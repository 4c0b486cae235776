package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// rig is a device with one allocation, pinned staging and a stream.
type rig struct {
	d     *Device
	p     uint64
	stage []byte
	s     driver.Stream
}

func newRig(t *testing.T, n int) *rig {
	t.Helper()
	d := New(Config{TotalMemory: 1 << 20})
	return &rig{d: d, p: mustAlloc(t, d, uint64(n)), stage: mustPinned(t, d, uint64(n)), s: mustStream(t, d)}
}

func (r *rig) close(t *testing.T) {
	t.Helper()
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.NoError(t, r.d.StreamDestroy(r.s))
	require.NoError(t, r.d.HostFree(ptrOf(r.stage)))
	require.NoError(t, r.d.MemFree(r.p))
	RequireNoLeaks(t, r.d)
}

func (r *rig) device(t *testing.T) []byte {
	t.Helper()
	b, err := r.d.ReadDevice(r.p, len(r.stage))
	require.NoError(t, err)
	return b
}

func TestStreamsAreLazy(t *testing.T) {
	syncs := map[string]func(r *rig) error{
		"StreamSynchronize": func(r *rig) error { return r.d.StreamSynchronize(r.s) },
		"StreamQuery": func(r *rig) error {
			done, err := r.d.StreamQuery(r.s)
			if err == nil && !done {
				panic("query after executing must report done")
			}
			return err
		},
		"EventSynchronize": func(r *rig) error {
			e, err := r.d.EventCreate(false)
			if err != nil {
				return err
			}
			defer r.d.EventDestroy(e)
			if err := r.d.EventRecord(e, r.s); err != nil {
				return err
			}
			return r.d.EventSynchronize(e)
		},
		"EventQuery": func(r *rig) error {
			e, err := r.d.EventCreate(true)
			if err != nil {
				return err
			}
			defer r.d.EventDestroy(e)
			if err := r.d.EventRecord(e, r.s); err != nil {
				return err
			}
			_, err = r.d.EventQuery(e)
			return err
		},
	}
	for name, fence := range syncs {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 64)
			require.NoError(t, r.d.WriteDevice(r.p, fill(64, 5)))

			// D2H: the destination keeps its old bytes until the fence.
			copy(r.stage, fill(64, 1))
			require.NoError(t, r.d.MemcpyDtoHAsync(r.stage, r.p, r.s))
			require.Equal(t, fill(64, 1), r.stage, "D2H wrote before the fence")
			require.Equal(t, 1, r.d.Live().QueuedOps)
			require.NoError(t, fence(r))
			require.Equal(t, fill(64, 5), r.stage)
			require.Zero(t, r.d.Live().QueuedOps)

			// H2D: host bytes are read at execution, so reusing staging
			// before the fence uploads the new bytes.
			copy(r.stage, fill(64, 7))
			require.NoError(t, r.d.MemcpyHtoDAsync(r.p, r.stage, r.s))
			require.Equal(t, fill(64, 5), r.device(t), "H2D landed before the fence")
			copy(r.stage, fill(64, 8))
			require.NoError(t, fence(r))
			require.Equal(t, fill(64, 8), r.device(t))
			r.close(t)
		})
	}
}

func TestEventRunsOnlyWorkBeforeIt(t *testing.T) {
	r := newRig(t, 64)
	e := mustEvent(t, r.d, false)
	require.NoError(t, r.d.MemsetD8Async(r.p, 1, 32, r.s))
	require.NoError(t, r.d.EventRecord(e, r.s))
	require.NoError(t, r.d.MemsetD8Async(r.p+32, 2, 32, r.s))
	require.NoError(t, r.d.EventSynchronize(e))
	require.Equal(t, append(fill(32, 1), fill(32, 0)...), r.device(t))
	require.Equal(t, 1, r.d.Live().QueuedOps)
	done, err := r.d.EventQuery(e)
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, append(fill(32, 1), fill(32, 2)...), r.device(t))

	// A never-recorded event is complete, as in CUDA.
	fresh := mustEvent(t, r.d, false)
	done, err = r.d.EventQuery(fresh)
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, r.d.EventSynchronize(fresh))
	require.NoError(t, r.d.EventDestroy(fresh))
	require.NoError(t, r.d.EventDestroy(e))
	r.close(t)
}

func TestStreamWaitEventOrdersAcrossStreams(t *testing.T) {
	r := newRig(t, 64)
	other := mustStream(t, r.d)
	e := mustEvent(t, r.d, false)
	dst := mustPinned(t, r.d, 64)

	copy(r.stage, fill(64, 9))
	require.NoError(t, r.d.MemcpyHtoDAsync(r.p, r.stage, other))
	require.NoError(t, r.d.EventRecord(e, other))
	require.NoError(t, r.d.MemsetD8Async(r.p, 4, 8, other)) // after the event: must not run
	require.NoError(t, r.d.StreamWaitEvent(r.s, e))
	require.NoError(t, r.d.MemcpyDtoHAsync(dst, r.p, r.s))

	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, fill(64, 9), dst, "the wait ran the other stream up to the event first")
	require.Equal(t, 1, r.d.Live().QueuedOps, "work after the event stays queued")
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, r.d.StreamDestroy(other))
	require.NoError(t, r.d.StreamSynchronize(other))
	require.Equal(t, append(fill(8, 4), fill(56, 9)...), r.device(t))

	// Waiting on a never-recorded or completed event queues nothing.
	fresh := mustEvent(t, r.d, false)
	require.NoError(t, r.d.StreamWaitEvent(r.s, fresh))
	require.NoError(t, r.d.StreamWaitEvent(r.s, e))
	require.Zero(t, r.d.Live().QueuedOps)

	for _, h := range []driver.Event{e, fresh} {
		require.NoError(t, r.d.EventDestroy(h))
	}
	require.NoError(t, r.d.StreamDestroy(other))
	require.NoError(t, r.d.HostFree(ptrOf(dst)))
	r.close(t)
}

func TestWaitOnEventRecordedAgain(t *testing.T) {
	// The wait binds to the record current when StreamWaitEvent is called;
	// a later re-record does not change what was waited for.
	r := newRig(t, 16)
	a := mustStream(t, r.d)
	e := mustEvent(t, r.d, false)
	require.NoError(t, r.d.MemsetD8Async(r.p, 1, 8, a))
	require.NoError(t, r.d.EventRecord(e, a))
	require.NoError(t, r.d.StreamWaitEvent(r.s, e))
	require.NoError(t, r.d.MemsetD8Async(r.p+8, 2, 8, a))
	require.NoError(t, r.d.EventRecord(e, a))
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, append(fill(8, 1), fill(8, 0)...), r.device(t))
	require.NoError(t, r.d.EventSynchronize(e))
	require.Equal(t, append(fill(8, 1), fill(8, 2)...), r.device(t))
	require.Zero(t, r.d.Live().QueuedOps)
	require.NoError(t, r.d.EventDestroy(e))
	require.NoError(t, r.d.StreamDestroy(a))
	r.close(t)
}

func TestNullAndDeadHandlesRefused(t *testing.T) {
	r := newRig(t, 64)
	dead := mustStream(t, r.d)
	require.NoError(t, r.d.StreamDestroy(dead))
	deadEv := mustEvent(t, r.d, true)
	require.NoError(t, r.d.EventDestroy(deadEv))
	e := mustEvent(t, r.d, true)

	for _, s := range []driver.Stream{0, dead, 0xdead, driver.Stream(e)} {
		calls := map[string]func() error{
			"StreamDestroy":     func() error { return r.d.StreamDestroy(s) },
			"StreamSynchronize": func() error { return r.d.StreamSynchronize(s) },
			"StreamQuery":       func() error { _, err := r.d.StreamQuery(s); return err },
			"StreamWaitEvent":   func() error { return r.d.StreamWaitEvent(s, e) },
			"EventRecord":       func() error { return r.d.EventRecord(e, s) },
			"MemcpyHtoDAsync":   func() error { return r.d.MemcpyHtoDAsync(r.p, r.stage, s) },
			"MemcpyDtoHAsync":   func() error { return r.d.MemcpyDtoHAsync(r.stage, r.p, s) },
			"MemcpyDtoDAsync":   func() error { return r.d.MemcpyDtoDAsync(r.p, r.p, 1, s) },
			"MemsetD8Async":     func() error { return r.d.MemsetD8Async(r.p, 0, 1, s) },
		}
		for name, call := range calls {
			before := r.d.Live()
			requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, call())
			require.Equal(t, before, r.d.Live(), "%s(0x%x)", name, uintptr(s))
		}
	}
	for _, ev := range []driver.Event{0, deadEv, 0xdead, driver.Event(r.s)} {
		calls := map[string]func() error{
			"EventDestroy":     func() error { return r.d.EventDestroy(ev) },
			"EventRecord":      func() error { return r.d.EventRecord(ev, r.s) },
			"EventQuery":       func() error { _, err := r.d.EventQuery(ev); return err },
			"EventSynchronize": func() error { return r.d.EventSynchronize(ev) },
			"EventElapsed":     func() error { _, err := r.d.EventElapsed(ev, e); return err },
			"EventElapsedEnd":  func() error { _, err := r.d.EventElapsed(e, ev); return err },
			"StreamWaitEvent":  func() error { return r.d.StreamWaitEvent(r.s, ev) },
		}
		for name, call := range calls {
			before := r.d.Live()
			requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, call())
			require.Equal(t, before, r.d.Live(), "%s(0x%x)", name, uintptr(ev))
		}
	}
	require.NoError(t, r.d.EventDestroy(e))
	r.close(t)
}

func TestStreamDestroyWithQueuedWorkRefused(t *testing.T) {
	r := newRig(t, 64)
	require.NoError(t, r.d.MemsetD8Async(r.p, 6, 64, r.s))
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, r.d.StreamDestroy(r.s))
	require.Equal(t, 1, r.d.Live().Streams)
	require.Equal(t, fill(64, 0), r.device(t), "a refused destroy runs nothing")
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, fill(64, 6), r.device(t))
	r.close(t)
}

func TestCopyBounds(t *testing.T) {
	r := newRig(t, 64)
	q := mustAlloc(t, r.d, 64)
	big := mustPinned(t, r.d, 1024)
	tests := []struct {
		name string
		call func() error
	}{
		{"HtoD past end", func() error { return r.d.MemcpyHtoDAsync(r.p+1, r.stage, r.s) }},
		{"HtoD spans allocations", func() error { return r.d.MemcpyHtoDAsync(r.p, big[:q-r.p+1], r.s) }},
		{"HtoD unknown", func() error { return r.d.MemcpyHtoDAsync(0x10, r.stage[:1], r.s) }},
		{"DtoH past end", func() error { return r.d.MemcpyDtoHAsync(big[:65], r.p, r.s) }},
		{"DtoH null", func() error { return r.d.MemcpyDtoHAsync(r.stage, 0, r.s) }},
		{"DtoD dst past end", func() error { return r.d.MemcpyDtoDAsync(r.p+60, q, 8, r.s) }},
		{"DtoD src past end", func() error { return r.d.MemcpyDtoDAsync(r.p, q+60, 8, r.s) }},
		{"DtoD wraps", func() error { return r.d.MemcpyDtoDAsync(r.p, q, ^uint64(0), r.s) }},
		{"memset past end", func() error { return r.d.MemsetD8Async(q, 1, 65, r.s) }},
		{"memset wraps", func() error { return r.d.MemsetD8Async(q+1, 1, ^uint64(0), r.s) }},
		{"zero length at null", func() error { return r.d.MemsetD8Async(0, 1, 0, r.s) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.d.Live()
			requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, tt.call())
			require.Equal(t, before, r.d.Live())
		})
	}
	// Exact fits and zero-length copies inside an allocation are fine.
	require.NoError(t, r.d.MemsetD8Async(q, 3, 64, r.s))
	require.NoError(t, r.d.MemcpyDtoDAsync(r.p, q, 64, r.s))
	require.NoError(t, r.d.MemcpyDtoDAsync(r.p+8, r.p, 8, r.s)) // overlapping, inside one allocation
	require.NoError(t, r.d.MemcpyHtoDAsync(r.p+64, nil, r.s))
	require.NoError(t, r.d.MemsetD8Async(r.p+64, 1, 0, r.s))
	require.NoError(t, r.d.StreamSynchronize(r.s))
	require.Equal(t, fill(64, 3), r.device(t))
	require.NoError(t, r.d.HostFree(ptrOf(big)))
	require.NoError(t, r.d.MemFree(q))
	r.close(t)
}

func TestUseAfterFreeBeforeFenceFailsAtSync(t *testing.T) {
	t.Run("device memory", func(t *testing.T) {
		r := newRig(t, 64)
		q := mustAlloc(t, r.d, 64)
		require.NoError(t, r.d.MemsetD8Async(q, 1, 64, r.s))
		require.NoError(t, r.d.MemFree(q))
		requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, r.d.StreamSynchronize(r.s))
		require.NoError(t, r.d.StreamSynchronize(r.s), "the failure is reported once")
		r.close(t)
	})
	t.Run("pinned staging", func(t *testing.T) {
		r := newRig(t, 64)
		stage := mustPinned(t, r.d, 64)
		copy(stage, fill(64, 2))
		require.NoError(t, r.d.MemcpyHtoDAsync(r.p, stage, r.s))
		require.NoError(t, r.d.HostFree(ptrOf(stage)))
		done, err := r.d.StreamQuery(r.s)
		requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, err)
		require.False(t, done)
		require.Equal(t, fill(64, 0), r.device(t), "the freed staging was not uploaded")
		r.close(t)
	})
	t.Run("event reports the recording stream's failure", func(t *testing.T) {
		r := newRig(t, 64)
		q := mustAlloc(t, r.d, 64)
		e := mustEvent(t, r.d, false)
		require.NoError(t, r.d.MemsetD8Async(q, 1, 64, r.s))
		require.NoError(t, r.d.EventRecord(e, r.s))
		require.NoError(t, r.d.MemFree(q))
		requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, r.d.EventSynchronize(e))
		require.NoError(t, r.d.EventDestroy(e))
		r.close(t)
	})
}

func TestEventElapsed(t *testing.T) {
	run := func(t *testing.T) time.Duration {
		r := newRig(t, 4096)
		start, end := mustEvent(t, r.d, true), mustEvent(t, r.d, true)
		require.NoError(t, r.d.EventRecord(start, r.s))
		require.NoError(t, r.d.MemcpyHtoDAsync(r.p, r.stage, r.s))
		require.NoError(t, r.d.EventRecord(end, r.s))

		_, err := r.d.EventElapsed(start, end)
		requireCode(t, cudaapi.CUDA_ERROR_NOT_READY, err)
		require.Equal(t, 3, r.d.Live().QueuedOps, "EventElapsed executes nothing")

		require.NoError(t, r.d.EventSynchronize(end))
		el, err := r.d.EventElapsed(start, end)
		require.NoError(t, err)
		back, err := r.d.EventElapsed(end, start)
		require.NoError(t, err)
		require.Equal(t, -el, back)
		require.NoError(t, r.d.EventDestroy(start))
		require.NoError(t, r.d.EventDestroy(end))
		r.close(t)
		return el
	}
	first := run(t)
	want := CopyOverhead + time.Duration(4096/HostBytesPerNs) + EventOverhead
	require.Equal(t, want, first, "the cost model: one 4 KiB H2D copy and the end record")
	require.Equal(t, first, run(t), "simulated time is deterministic")

	d := New(Config{})
	s := mustStream(t, d)
	timing, plain, unrec := mustEvent(t, d, true), mustEvent(t, d, false), mustEvent(t, d, true)
	require.NoError(t, d.EventRecord(timing, s))
	require.NoError(t, d.EventRecord(plain, s))
	require.NoError(t, d.StreamSynchronize(s))
	for _, pair := range [][2]driver.Event{{timing, plain}, {plain, timing}, {timing, unrec}, {unrec, timing}} {
		_, err := d.EventElapsed(pair[0], pair[1])
		requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, err)
	}
	el, err := d.EventElapsed(timing, timing)
	require.NoError(t, err)
	require.Zero(t, el)
	for _, e := range []driver.Event{timing, plain, unrec} {
		require.NoError(t, d.EventDestroy(e))
	}
	require.NoError(t, d.StreamDestroy(s))
	RequireNoLeaks(t, d)
}

func TestFreedBeforeExecutionEveryCopy(t *testing.T) {
	cases := map[string]func(r *rig, q uint64) error{
		"DtoH source": func(r *rig, q uint64) error { return r.d.MemcpyDtoHAsync(r.stage, q, r.s) },
		"DtoD source": func(r *rig, q uint64) error { return r.d.MemcpyDtoDAsync(r.p, q, 64, r.s) },
		"DtoD dest":   func(r *rig, q uint64) error { return r.d.MemcpyDtoDAsync(q, r.p, 64, r.s) },
		"HtoD dest":   func(r *rig, q uint64) error { return r.d.MemcpyHtoDAsync(q, r.stage, r.s) },
	}
	for name, queue := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 64)
			copy(r.stage, fill(64, 4))
			q := mustAlloc(t, r.d, 64)
			require.NoError(t, queue(r, q))
			require.NoError(t, r.d.MemFree(q))
			err := r.d.StreamSynchronize(r.s)
			requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, err)
			require.Contains(t, err.Error(), "StreamSynchronize")
			require.Equal(t, fill(64, 4), r.stage, "a failed copy writes nothing")
			require.Equal(t, fill(64, 0), r.device(t))
			r.close(t)
		})
	}
	t.Run("DtoH pinned destination freed", func(t *testing.T) {
		r := newRig(t, 64)
		dst := mustPinned(t, r.d, 64)
		require.NoError(t, r.d.MemsetD8Async(r.p, 9, 64, r.s))
		require.NoError(t, r.d.MemcpyDtoHAsync(dst, r.p, r.s))
		require.NoError(t, r.d.HostFree(ptrOf(dst)))
		requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, r.d.StreamSynchronize(r.s))
		require.Equal(t, fill(64, PoisonByte), dst, "nothing lands in freed staging")
		r.close(t)
	})
}
