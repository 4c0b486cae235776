package streams_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func kinds(idle, created, destroyed int) streams.KindCounts {
	return streams.KindCounts{Idle: idle, Created: uint64(created), Destroyed: uint64(destroyed)}
}

func TestPoolLeaseHandsOutDistinctNonNullResources(t *testing.T) {
	for _, timing := range []bool{false, true} {
		dev := newFake()
		p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
		l, err := p.Lease("Dispatch", timing)
		require.NoError(t, err)
		assert.NotZero(t, l.Stream)
		assert.NotZero(t, l.Done)
		if timing {
			assert.NotZero(t, l.Start)
			assert.NotZero(t, l.End)
			assert.NotEqual(t, l.Start, l.End)
			assert.NotEqual(t, l.Done, l.Start)
		} else {
			assert.Zero(t, l.Start)
			assert.Zero(t, l.End)
		}
		// The stream is usable: the sim refuses unknown handles.
		require.NoError(t, dev.EventRecord(l.Done, l.Stream))
		require.NoError(t, dev.EventSynchronize(l.Done))

		nTiming := 0
		if timing {
			nTiming = 2
		}
		assert.Equal(t, streams.Counts{
			Streams: kinds(0, 1, 0), CompletionEvents: kinds(0, 1, 0), TimingEvents: kinds(0, nTiming, 0), Leases: 1,
		}, p.Counts())

		p.Return(l, true)
		assert.Equal(t, streams.Counts{
			Streams: kinds(1, 1, 0), CompletionEvents: kinds(1, 1, 0), TimingEvents: kinds(nTiming, nTiming, 0),
		}, p.Counts())
		require.NoError(t, p.Close())
		assert.Equal(t, streams.Counts{
			Streams: kinds(0, 1, 1), CompletionEvents: kinds(0, 1, 1), TimingEvents: kinds(0, nTiming, nTiming),
		}, p.Counts())
		requireNoLive(t, dev)
	}
}

func TestPoolLeasesReuseIdleResources(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l1, err := p.Lease("a", true)
	require.NoError(t, err)
	stream, done := l1.Stream, l1.Done
	p.Return(l1, true)

	l2, err := p.Lease("b", true)
	require.NoError(t, err)
	assert.Equal(t, stream, l2.Stream)
	assert.Equal(t, done, l2.Done)
	assert.Equal(t, uint64(1), dev.Count(opStreamCreate))
	assert.Equal(t, uint64(3), dev.Count(opEventCreate))

	// A lease without timing leaves the timing events idle.
	l3, err := p.Lease("c", false)
	require.NoError(t, err)
	assert.Equal(t, 0, p.Counts().TimingEvents.Idle)
	p.Return(l2, true)
	assert.Equal(t, 2, p.Counts().TimingEvents.Idle)
	p.Return(l3, true)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPoolReturnIsIdempotentAndIgnoresForeignOrNilLeases(t *testing.T) {
	dev := newFake()
	log, logs := newLog()
	p := streams.NewPool(dev, log, streams.DefaultMaxIdle)
	other := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l, err := p.Lease("x", false)
	require.NoError(t, err)
	foreign, err := other.Lease("x", false)
	require.NoError(t, err)

	p.Return(l, true)
	p.Return(l, true)
	p.Return(l, false) // already returned: must not destroy a resource now idle
	p.Return(nil, true)
	p.Return(foreign, true)
	assert.Equal(t, streams.Counts{
		Streams: kinds(1, 1, 0), CompletionEvents: kinds(1, 1, 0),
	}, p.Counts())
	assert.Len(t, logs.Errors(), 1, "a foreign lease is logged")
	assert.Zero(t, dev.Count(opStreamDestroy))

	other.Return(foreign, true)
	require.NoError(t, other.Close())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPoolUnhealthyReturnDestroys(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l, err := p.Lease("x", true)
	require.NoError(t, err)
	p.Return(l, false)
	assert.Equal(t, streams.Counts{
		Streams: kinds(0, 1, 1), CompletionEvents: kinds(0, 1, 1), TimingEvents: kinds(0, 2, 2),
	}, p.Counts())
	requireNoLive(t, dev)
	require.NoError(t, p.Close())
}

func TestPoolIdleResourcesAreBoundedPerKind(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, 2)
	var ls []*streams.Lease
	for range 5 {
		l, err := p.Lease("x", true)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	for _, l := range ls {
		p.Return(l, true)
	}
	assert.Equal(t, streams.Counts{
		Streams: kinds(2, 5, 3), CompletionEvents: kinds(2, 5, 3), TimingEvents: kinds(2, 10, 8),
	}, p.Counts())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPoolLeaseFailuresReturnEverythingAcquired(t *testing.T) {
	cases := []struct {
		name      string
		timing    bool
		arm       func(*fakeDriver)
		code      cudaapi.Result
		phrase    string
		wantAfter streams.Counts
	}{
		{"stream create fails", true,
			func(d *fakeDriver) { d.FailNth(opStreamCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "StreamCreate failed", streams.Counts{}},
		{"stream create returns null", false,
			func(d *fakeDriver) { d.NullNth(opStreamCreate, 1) },
			0, "StreamCreate returned success with a null result", streams.Counts{}},
		{"completion event fails", false,
			func(d *fakeDriver) { d.FailNth(opEventCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "EventCreate failed",
			streams.Counts{Streams: kinds(1, 1, 0)}},
		{"completion event null", true,
			func(d *fakeDriver) { d.NullNth(opEventCreate, 1) },
			0, "EventCreate returned success with a null result",
			streams.Counts{Streams: kinds(1, 1, 0)}},
		{"start timing event fails", true,
			func(d *fakeDriver) { d.FailNth(opEventCreate, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) },
			cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "EventCreate failed",
			streams.Counts{Streams: kinds(1, 1, 0), CompletionEvents: kinds(1, 1, 0)}},
		{"end timing event null", true,
			func(d *fakeDriver) { d.NullNth(opEventCreate, 3) },
			0, "EventCreate returned success with a null result",
			streams.Counts{Streams: kinds(1, 1, 0), CompletionEvents: kinds(1, 1, 0), TimingEvents: kinds(1, 1, 0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newFake()
			p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
			c.arm(dev)
			l, err := p.Lease("Dispatch", c.timing)
			ce := requireErrKind(t, err, errs.ErrDriver, "Dispatch", c.phrase)
			assert.Equal(t, c.code, ce.Code)
			assert.Nil(t, l)
			assert.Equal(t, c.wantAfter, p.Counts(), "acquired resources went back idle; no lease is out")

			// The pool still works, reusing what was given back.
			l, err = p.Lease("Dispatch", c.timing)
			require.NoError(t, err)
			p.Return(l, true)
			require.NoError(t, p.Close(), "no lease leaked, so close succeeds")
			requireNoLive(t, dev)
		})
	}
}

func TestPoolCloseRefusesWhileLeasesAreOut(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	idle, err := p.Lease("x", false)
	require.NoError(t, err)
	p.Return(idle, true)
	l, err := p.Lease("x", true)
	require.NoError(t, err)
	before := p.Counts()

	requireErrKind(t, p.Close(), errs.ErrInFlight, "1 launch-resource lease(s) still out")
	assert.Equal(t, before, p.Counts(), "a refused close changes nothing")
	l2, err := p.Lease("x", false)
	require.NoError(t, err, "a refused close leaves the pool open")

	p.Return(l, true)
	p.Return(l2, true)
	require.NoError(t, p.Close())
	_, err = p.Lease("Late", false)
	requireErrKind(t, err, errs.ErrClosed, "Late")
	require.NoError(t, p.Close(), "close is idempotent")
	requireNoLive(t, dev)
}

func TestPoolCloseReportsTheFirstDestroyFailure(t *testing.T) {
	dev := newFake()
	log, logs := newLog()
	p := streams.NewPool(dev, log, streams.DefaultMaxIdle)
	l, err := p.Lease("x", false)
	require.NoError(t, err)
	p.Return(l, true)
	dev.FailNth(opStreamDestroy, 1, cudaapi.CUDA_ERROR_INVALID_HANDLE)
	ce := requireErrKind(t, p.Close(), errs.ErrDriver, "StreamDestroy")
	assert.Equal(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, ce.Code)
	assert.Len(t, logs.Errors(), 1)
	assert.Equal(t, uint64(1), dev.Count(opEventDestroy), "the event was still destroyed")
	c := p.Counts()
	assert.Equal(t, kinds(0, 1, 0), c.Streams)
	assert.Equal(t, kinds(0, 1, 1), c.CompletionEvents)
	require.NoError(t, dev.StreamDestroy(l.Stream))
	requireNoLive(t, dev)
}

func TestPoolConcurrentLeases(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, 4)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				l, err := p.Lease("x", (g+i)%3 == 0)
				if !assert.NoError(t, err) {
					return
				}
				// Fence the recorded work: resources go back idle, and the
				// simulated device refuses to destroy a stream with queued work.
				if !assert.NoError(t, dev.EventRecord(l.Done, l.Stream)) ||
					!assert.NoError(t, dev.EventSynchronize(l.Done)) {
					p.Return(l, false)
					return
				}
				p.Return(l, i%10 != 0)
			}
		}()
	}
	wg.Wait()
	c := p.Counts()
	assert.Zero(t, c.Leases)
	for _, k := range []streams.KindCounts{c.Streams, c.CompletionEvents, c.TimingEvents} {
		assert.LessOrEqual(t, k.Idle, 4)
		assert.Equal(t, k.Created, k.Destroyed+uint64(k.Idle), "every created resource is idle or destroyed")
	}
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPoolTimingPairLeaseHoldsOnlyTimingEvents(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l, err := p.LeaseTimingPair("Time")
	require.NoError(t, err)
	assert.Zero(t, l.Stream)
	assert.Zero(t, l.Done)
	assert.NotZero(t, l.Start)
	assert.NotZero(t, l.End)
	assert.Zero(t, dev.Count(opStreamCreate))
	p.Return(l, true)
	assert.Equal(t, streams.Counts{TimingEvents: kinds(2, 2, 0)}, p.Counts())

	dev.FailNth(opEventCreate, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	l1, err := p.LeaseTimingPair("Time") // both from idle: no EventCreate
	require.NoError(t, err)
	l2, err := p.LeaseTimingPair("Time") // first create succeeds, second fails
	requireErrKind(t, err, errs.ErrDriver, "EventCreate failed")
	assert.Nil(t, l2)
	assert.Equal(t, streams.Counts{TimingEvents: kinds(1, 3, 0), Leases: 1}, p.Counts())
	p.Return(l1, true)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}
