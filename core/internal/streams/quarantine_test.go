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

// ledger hands out items that record their releases by name.
type ledger struct {
	mu       sync.Mutex
	released map[string]int
}

func newLedger() *ledger { return &ledger{released: map[string]int{}} }

func (g *ledger) item(name string, k streams.ItemKind, n uint64) streams.Item {
	return streams.Item{Kind: k, Bytes: n, Release: func() {
		g.mu.Lock()
		g.released[name]++
		g.mu.Unlock()
	}}
}

// counts returns how often each of names was released, in order.
func (g *ledger) counts(names ...string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = g.released[n]
	}
	return out
}

// holdOf returns a hold callback for h that counts its calls in *calls.
func holdOf(h streams.Hold, calls *int) func() streams.Hold {
	return func() streams.Hold {
		*calls++
		return h
	}
}

func lease(t *testing.T, p *streams.Pool) *streams.Lease {
	t.Helper()
	l, err := p.Lease("test", false)
	require.NoError(t, err)
	return l
}

func TestSyncOrQuarantineReturnsLeasesWhoseStreamsSynchronize(t *testing.T) {
	for _, discard := range []bool{false, true} {
		dev := newFake()
		p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
		l1, l2 := lease(t, p), lease(t, p)
		dev.queue(t, l1.Stream)
		calls := 0
		assert.True(t, p.SyncOrQuarantine("Op", discard, holdOf(streams.Hold{}, &calls), l1, nil, l2))
		assert.Zero(t, calls, "nothing is stuck: the caller keeps what it holds")
		want := streams.Counts{Streams: kinds(2, 2, 0), CompletionEvents: kinds(2, 2, 0)}
		if discard {
			want = streams.Counts{Streams: kinds(0, 2, 2), CompletionEvents: kinds(0, 2, 2)}
		}
		assert.Equal(t, want, p.Counts(), "discard=%v", discard)
		require.NoError(t, p.Close())
		requireNoLive(t, dev)
	}
}

func TestSyncOrQuarantineHoldsStuckStreamsUntilTheySynchronize(t *testing.T) {
	for _, discard := range []bool{false, true} {
		dev := newFake()
		log, logs := newLog()
		p := streams.NewPool(dev, log, streams.DefaultMaxIdle)
		ok, stuck := lease(t, p), lease(t, p)
		dev.queue(t, stuck.Stream)
		dev.setStuck(stuck.Stream, true)
		g := newLedger()
		names := []string{"pin", "dev", "buf1", "buf2", "range"}
		h := streams.Hold{Items: []streams.Item{g.item("pin", streams.PinnedStaging, 100),
			g.item("dev", streams.DeviceStaging, 200), g.item("buf1", streams.BufferRef, 8),
			g.item("buf2", streams.BufferRef, 16), g.item("range", streams.PinnedRange, 64)}}
		calls := 0

		assert.False(t, p.SyncOrQuarantine("Op", discard, holdOf(h, &calls), ok, stuck))
		assert.Equal(t, 1, calls)
		assert.Len(t, logs.Errors(), 1, "the stuck stream is logged")
		c := p.Counts()
		assert.Equal(t, 1, c.Leases, "the stuck lease stays out")
		assert.Equal(t, 1, c.Quarantined)
		assert.Equal(t, int64(1), p.QuarantinedLeases())
		assert.Equal(t, int64(2), p.QuarantinedRefs(), "the BufferRef items")
		assert.Equal(t, []int{0, 0, 0, 0, 0}, g.counts(names...))

		// Retries while the stream is stuck release nothing; Lease retries too.
		syncs := dev.Count(opStreamSynchronize)
		assert.False(t, p.RetryQuarantine())
		l := lease(t, p)
		assert.Equal(t, syncs+2, dev.Count(opStreamSynchronize))
		assert.Equal(t, []int{0, 0, 0, 0, 0}, g.counts(names...))
		requireErrKind(t, p.Close(), errs.ErrInFlight, "2 launch-resource lease(s) still out")

		destroyed := p.Counts().Streams.Destroyed
		dev.setStuck(stuck.Stream, false)
		assert.True(t, p.RetryQuarantine())
		assert.Equal(t, []int{1, 1, 1, 1, 1}, g.counts(names...), "each item is released once")
		assert.Zero(t, p.QuarantinedLeases())
		assert.Zero(t, p.QuarantinedRefs())
		assert.Equal(t, 1, p.Counts().Leases, "only the new lease is out")
		if discard {
			destroyed++ // a discarded lease's resources are destroyed once it synchronizes
		}
		assert.Equal(t, destroyed, p.Counts().Streams.Destroyed, "discard=%v", discard)

		syncs = dev.Count(opStreamSynchronize)
		assert.True(t, p.RetryQuarantine())
		assert.Equal(t, syncs, dev.Count(opStreamSynchronize), "an empty quarantine makes no driver call")
		assert.Equal(t, []int{1, 1, 1, 1, 1}, g.counts(names...))
		p.Return(l, true)
		require.NoError(t, p.Close())
		requireNoLive(t, dev)
	}
}

func TestQuarantineKeepsAnEntryUntilAllItsStreamsSynchronize(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	a, b := lease(t, p), lease(t, p)
	dev.setStuck(a.Stream, true)
	dev.setStuck(b.Stream, true)
	g := newLedger()
	calls := 0
	require.False(t, p.SyncOrQuarantine("Op", false, holdOf(streams.Hold{Items: []streams.Item{g.item("x", streams.BufferRef, 1)}}, &calls), a, b))
	assert.Equal(t, int64(2), p.QuarantinedLeases())

	dev.setStuck(a.Stream, false)
	assert.False(t, p.RetryQuarantine())
	assert.Equal(t, int64(1), p.QuarantinedLeases(), "the stream that synchronized went back")
	assert.Equal(t, 1, p.Counts().Streams.Idle)
	assert.Equal(t, []int{0}, g.counts("x"), "the other stream may still use the item")

	dev.setStuck(b.Stream, false)
	assert.True(t, p.RetryQuarantine())
	assert.Equal(t, []int{1}, g.counts("x"))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestQuarantineWithoutHoldOrReleaseCallbacks(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l := lease(t, p)
	dev.setStuck(l.Stream, true)
	require.False(t, p.SyncOrQuarantine("Op", false, nil, l))
	l2 := lease(t, p)
	dev.setStuck(l2.Stream, true)
	require.False(t, p.SyncOrQuarantine("Op", false, func() streams.Hold {
		return streams.Hold{Items: []streams.Item{{Kind: streams.BufferRef, Bytes: 4}}}
	}, l2))
	assert.Equal(t, int64(1), p.QuarantinedRefs())
	dev.setStuck(l.Stream, false)
	dev.setStuck(l2.Stream, false)
	assert.True(t, p.RetryQuarantine())
	assert.Zero(t, p.QuarantinedRefs())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPeerItemsWaitForTheOwningPoolsStream(t *testing.T) {
	for _, ownerFirst := range []bool{false, true} {
		dev := newFake()
		owner := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
		peer := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
		l := lease(t, owner)
		dev.setStuck(l.Stream, true)
		g := newLedger()
		h := streams.Hold{Items: []streams.Item{g.item("own", streams.BufferRef, 8)},
			Peer: peer, PeerItems: []streams.Item{g.item("src", streams.BufferRef, 8), g.item("src2", streams.BufferRef, 8)}}
		calls := 0
		require.False(t, owner.SyncOrQuarantine("CopyPeer", false, holdOf(h, &calls), l))
		assert.Equal(t, int64(1), owner.QuarantinedRefs())
		assert.Equal(t, int64(2), peer.QuarantinedRefs(), "the peer's items wait in the peer's quarantine")
		assert.Zero(t, peer.QuarantinedLeases(), "with no stream of their own")
		assert.Zero(t, peer.Counts().Quarantined)

		syncs := dev.Count(opStreamSynchronize)
		assert.False(t, peer.RetryQuarantine())
		assert.Equal(t, syncs+1, dev.Count(opStreamSynchronize), "the peer retries the owner's stream")
		assert.Equal(t, []int{0, 0, 0}, g.counts("own", "src", "src2"))

		dev.setStuck(l.Stream, false)
		if ownerFirst {
			assert.True(t, owner.RetryQuarantine())
			assert.Equal(t, []int{1, 0, 0}, g.counts("own", "src", "src2"), "the peer's items wait for the peer's retry")
			syncs = dev.Count(opStreamSynchronize)
		}
		assert.True(t, peer.RetryQuarantine())
		if ownerFirst {
			assert.Equal(t, syncs, dev.Count(opStreamSynchronize), "nothing left to synchronize")
		}
		assert.Equal(t, []int{1, 1, 1}, g.counts("own", "src", "src2"))
		assert.Zero(t, owner.QuarantinedRefs())
		assert.Zero(t, peer.QuarantinedRefs())
		assert.True(t, owner.RetryQuarantine())
		require.NoError(t, owner.Close())
		require.NoError(t, peer.Close())
		requireNoLive(t, dev)
	}
}

func TestPeerItemsOfTheDrainingPoolAreHeldWithItsOwn(t *testing.T) {
	dev := newFake()
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	l := lease(t, p)
	dev.setStuck(l.Stream, true)
	g := newLedger()
	h := streams.Hold{Items: []streams.Item{g.item("a", streams.BufferRef, 1)},
		Peer: p, PeerItems: []streams.Item{g.item("b", streams.BufferRef, 1)}}
	calls := 0
	require.False(t, p.SyncOrQuarantine("CopyPeer", false, holdOf(h, &calls), l))
	assert.Equal(t, int64(2), p.QuarantinedRefs())
	dev.setStuck(l.Stream, false)
	assert.True(t, p.RetryQuarantine())
	assert.Equal(t, []int{1, 1}, g.counts("a", "b"))
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestSettleQuarantineAbandonsStreamsThatStillFail(t *testing.T) {
	dev := newFake()
	owner := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	peer := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	g := newLedger()
	calls := 0

	// One entry whose stream recovers before the settle, one that never does.
	recovers, fails := lease(t, owner), lease(t, owner)
	dev.setStuck(recovers.Stream, true)
	dev.setStuck(fails.Stream, true)
	up := streams.Hold{Items: []streams.Item{g.item("up", streams.PinnedStaging, 4096)}}
	require.False(t, owner.SyncOrQuarantine("Upload", false, holdOf(up, &calls), recovers))
	h := streams.Hold{Items: []streams.Item{g.item("pin", streams.PinnedStaging, 100), g.item("dev", streams.DeviceStaging, 200),
		g.item("buf", streams.BufferRef, 8), g.item("range", streams.PinnedRange, 64), g.item("range2", streams.PinnedRange, 32)},
		Peer: peer, PeerItems: []streams.Item{g.item("src", streams.BufferRef, 8)}}
	require.False(t, owner.SyncOrQuarantine("CopyPeer", false, holdOf(h, &calls), fails))
	dev.setStuck(recovers.Stream, false)
	requireErrKind(t, owner.Close(), errs.ErrInFlight, "2 launch-resource lease(s) still out")

	a := peer.SettleQuarantine()
	assert.Equal(t, 0, a.Streams)
	assert.Equal(t, 1, a.PeerWaits, "the peer's entry waited for a stream that never synchronized")
	assert.Equal(t, []string{"CopyPeer"}, a.Ops)
	assert.Equal(t, 1, a.Count[streams.BufferRef])
	assert.False(t, a.Empty())

	a = owner.SettleQuarantine()
	assert.Equal(t, 1, a.Streams)
	assert.Zero(t, a.PeerWaits)
	assert.Equal(t, []string{"CopyPeer"}, a.Ops, "the recovered entry was released, not abandoned")
	assert.ErrorIs(t, a.Err, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	assert.Equal(t, [streams.NumItemKinds]int{1, 1, 1, 2}, a.Count)
	assert.Equal(t, [streams.NumItemKinds]uint64{100, 200, 8, 96}, a.Bytes)
	assert.Equal(t, []int{1, 0, 0, 0, 0, 0, 0}, g.counts("up", "pin", "dev", "buf", "range", "range2", "src"),
		"what a stuck stream may use is never released")
	assert.Zero(t, owner.QuarantinedLeases())
	assert.Equal(t, int64(1), owner.QuarantinedRefs(), "an abandoned buffer keeps its reference")
	assert.Equal(t, uint64(1), owner.Counts().Streams.Destroyed, "the stuck stream is destroyed")

	assert.True(t, owner.SettleQuarantine().Empty(), "a second settle finds nothing")
	assert.True(t, owner.RetryQuarantine())
	require.NoError(t, owner.Close())
	require.NoError(t, peer.Close())
	requireNoLive(t, dev)
}

func TestQuarantinesOfTwoPoolsWaitingOnEachOther(t *testing.T) {
	dev := newFake()
	a := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	b := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	g := newLedger()
	la, lb := lease(t, a), lease(t, b)
	dev.setStuck(la.Stream, true)
	dev.setStuck(lb.Stream, true)
	calls := 0
	require.False(t, a.SyncOrQuarantine("AtoB", false, holdOf(streams.Hold{Items: []streams.Item{g.item("a", streams.BufferRef, 1)},
		Peer: b, PeerItems: []streams.Item{g.item("a-src", streams.BufferRef, 1)}}, &calls), la))
	require.False(t, b.SyncOrQuarantine("BtoA", false, holdOf(streams.Hold{Items: []streams.Item{g.item("b", streams.BufferRef, 1)},
		Peer: a, PeerItems: []streams.Item{g.item("b-src", streams.BufferRef, 1)}}, &calls), lb))

	// Retries and leases of both, at once, while both are stuck: nothing is
	// released, and nothing deadlocks or recurses.
	var wg sync.WaitGroup
	for _, p := range []*streams.Pool{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				p.RetryQuarantine()
				if l, err := p.Lease("x", false); assert.NoError(t, err) {
					p.Return(l, true)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, []int{0, 0, 0, 0}, g.counts("a", "a-src", "b", "b-src"))

	dev.setStuck(la.Stream, false)
	dev.setStuck(lb.Stream, false)
	assert.True(t, a.RetryQuarantine())
	assert.True(t, b.RetryQuarantine())
	assert.Equal(t, []int{1, 1, 1, 1}, g.counts("a", "a-src", "b", "b-src"))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	requireNoLive(t, dev)
}
