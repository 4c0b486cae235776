package proptest

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// Small uploads without a fence, on two simulated devices that stage small
// pageable copies themselves (Capabilities.InlineCopies), whose streams run
// only when someone looks, and which report queued work unfinished half of
// the time (HoldQueries). Random sequences of every kind of call that
// writes or reads a buffer run against a plain model: each buffer's bytes
// as the calls so far left them.
//
// Safety: every read (Download, DownloadMany, Run, a graph replay, and the
// reads after a peer copy) returns the model's bytes, so no call ever runs
// ahead of a small upload that returned before it. Liveness: every call
// returns, every sequence ends with the Backends closing with nothing left
// on either device, and over the run small uploads did return without a
// fence (the launch pools held unfenced work) and readers did queue behind
// it.

// unfencedBufLen is the length of every buffer of the property.
const unfencedBufLen = 64 << 10

// unfencedRun is one sequence: two Backends, their buffers and the model.
type unfencedRun struct {
	rng   *rand.Rand
	m     *sim.Machine
	bs    []*core.Backend
	bufs  []core.Buffer // live buffers, on bs[owner[i]]
	owner []int
	model [][]byte
	pin   *core.PinnedBuffer // UploadAsync's source, on bs[0]
	seen  int                // times a call found unfenced work
}

func TestCoreSmallUploadsOrderEveryReader(t *testing.T) {
	seed := coreSeed(t)
	seqs, steps := 12, 60
	if coreLong() {
		seqs, steps = 200, 300
	}
	seen := 0
	for i := range seqs {
		r := newUnfencedRun(t, seed+int64(i))
		for s := range steps {
			if err := r.step(); err != nil {
				t.Fatalf("sequence %d step %d: %v", i, s, err)
			}
		}
		r.close(t)
		seen += r.seen
	}
	require.Positive(t, seen, "no call ever found a small upload unfenced")
}

func newUnfencedRun(t *testing.T, seed int64) *unfencedRun {
	caps := sim.DefaultCapabilities()
	caps.InlineCopies = true
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Device: sim.Config{TotalMemory: 32 << 20, Capabilities: &caps}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers())
	require.NoError(t, err)
	r := &unfencedRun{rng: rand.New(rand.NewSource(seed)), m: m, bs: g.Backends()}
	r.pin, err = r.bs[0].AllocHostPinned(unfencedBufLen)
	require.NoError(t, err)
	for range 4 {
		require.NoError(t, r.alloc(r.rng.Intn(2)))
	}
	return r
}

// close frees everything, closes the Backends and checks both devices.
func (r *unfencedRun) close(t *testing.T) {
	for i := range r.bufs {
		require.NoError(t, r.bs[r.owner[i]].Free(r.bufs[i]))
	}
	require.NoError(t, r.pin.Free())
	for _, b := range r.bs {
		require.NoError(t, b.Close())
	}
	sim.RequireMachineNoLeaks(t, r.m)
}

// alloc adds a buffer on Backend k and fills it with a small or a large
// upload, so the model knows every byte.
func (r *unfencedRun) alloc(k int) error {
	h, err := r.bs[k].Alloc(unfencedBufLen)
	if err != nil {
		return err
	}
	r.bufs, r.owner, r.model = append(r.bufs, h), append(r.owner, k), append(r.model, make([]byte, unfencedBufLen))
	return r.upload(len(r.bufs)-1, 0, unfencedBufLen)
}

// upload writes n random bytes at off of buffer i from Go memory: a small
// upload (the driver stages it, no fence) when n <= 32 KiB.
func (r *unfencedRun) upload(i, off, n int) error {
	data := make([]byte, n)
	r.rng.Read(data)
	r.noteUnfenced(r.owner[i])
	if err := r.bs[r.owner[i]].Upload(core.UploadAt{Buf: r.bufs[i], Offset: off, Data: data}); err != nil {
		return fmt.Errorf("upload %d bytes at %d: %w", n, off, err)
	}
	copy(r.model[i][off:], data)
	return nil
}

// noteUnfenced counts a call that finds Backend k holding unfenced work.
func (r *unfencedRun) noteUnfenced(k int) {
	if r.bs[k].LaunchResourceCounts().Unfenced > 0 {
		r.seen++
	}
}

// check compares what a call read of buffer i with the model.
func (r *unfencedRun) check(call string, i int, got []byte) error {
	if !bytes.Equal(got, r.model[i]) {
		return fmt.Errorf("%s of buffer %d read bytes other than the calls before it left", call, i)
	}
	return nil
}

// pick returns a live buffer's index.
func (r *unfencedRun) pick() int { return r.rng.Intn(len(r.bufs)) }

func (r *unfencedRun) step() error {
	for d := range r.m.Len() {
		r.m.Device(d).HoldQueries(r.rng.Intn(2) == 0)
	}
	i := r.pick()
	b := r.bs[r.owner[i]]
	switch op := r.rng.Intn(12); op {
	case 0, 1, 2:
		n := 1 + r.rng.Intn(32<<10)
		return r.upload(i, r.rng.Intn(unfencedBufLen-n+1), n)
	case 3:
		return r.upload(i, 0, unfencedBufLen) // staged
	case 4:
		r.noteUnfenced(r.owner[i])
		got, err := b.Download(r.bufs[i].All(), nil)
		if err != nil {
			return err
		}
		return r.check("Download", i, got)
	case 5:
		return r.downloadMany(r.owner[i])
	case 6:
		return r.run(i)
	case 7:
		return r.replay(i)
	case 8:
		return r.copyPeer()
	case 9:
		return r.uploadAsync()
	case 10:
		if err := b.Free(r.bufs[i]); err != nil {
			return err
		}
		k := r.owner[i]
		r.bufs = append(r.bufs[:i], r.bufs[i+1:]...)
		r.owner = append(r.owner[:i], r.owner[i+1:]...)
		r.model = append(r.model[:i], r.model[i+1:]...)
		if err := r.bs[k].Trim(); err != nil {
			return err
		}
		return r.alloc(r.rng.Intn(2))
	default:
		return r.alloc(r.rng.Intn(2))
	}
}

// downloadMany reads every buffer of Backend k in one call.
func (r *unfencedRun) downloadMany(k int) error {
	var rs []core.Range
	var idx []int
	for i := range r.bufs {
		if r.owner[i] == k {
			rs, idx = append(rs, r.bufs[i].All()), append(idx, i)
		}
	}
	r.noteUnfenced(k)
	out, err := r.bs[k].DownloadMany(rs, nil)
	if err != nil {
		return err
	}
	for j, i := range idx {
		if err := r.check("DownloadMany", i, out[j]); err != nil {
			return err
		}
	}
	return nil
}

// run reads buffer i back in a Run that also uploads a few bytes into it.
func (r *unfencedRun) run(i int) error {
	data := make([]byte, 1+r.rng.Intn(4096))
	r.rng.Read(data)
	off := r.rng.Intn(unfencedBufLen - len(data) + 1)
	b := r.bs[r.owner[i]]
	r.noteUnfenced(r.owner[i])
	out, err := b.Run(core.Batch{Uploads: []core.UploadAt{{Buf: r.bufs[i], Offset: off, Data: data}}, Reads: []core.Range{r.bufs[i].All()}}, nil)
	if err != nil {
		return err
	}
	copy(r.model[i][off:], data)
	return r.check("Run", i, out[0])
}

// replay captures a read of buffer i and replays it.
func (r *unfencedRun) replay(i int) error {
	b := r.bs[r.owner[i]]
	r.noteUnfenced(r.owner[i])
	g, err := b.Capture(core.Batch{Reads: []core.Range{r.bufs[i].All()}})
	if err != nil {
		return err
	}
	out, err := g.Replay(nil)
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return r.check("Graph.Replay", i, out[0])
}

// copyPeer copies a random buffer over another, across Backends when they
// differ, then reads the destination back.
func (r *unfencedRun) copyPeer() error {
	src, dst := r.pick(), r.pick()
	if src == dst {
		return nil
	}
	r.noteUnfenced(r.owner[src])
	err := core.CopyPeer(r.bs[r.owner[dst]], r.bs[r.owner[src]], []core.PeerCopy{{Dst: r.bufs[dst], Src: r.bufs[src], Len: unfencedBufLen}})
	if err != nil {
		return err
	}
	copy(r.model[dst], r.model[src])
	got, err := r.bs[r.owner[dst]].Download(r.bufs[dst].All(), nil)
	if err != nil {
		return err
	}
	return r.check("CopyPeer then Download", dst, got)
}

// uploadAsync writes a buffer of Backend 0 from pinned memory without
// waiting, twice over the held stream, then synchronizes.
func (r *unfencedRun) uploadAsync() error {
	var i = -1
	for j := range r.bufs {
		if r.owner[j] == 0 {
			i = j
			break
		}
	}
	if i < 0 {
		return nil
	}
	b, src := r.bs[0], r.pin.Bytes()
	half := unfencedBufLen / 2
	r.rng.Read(src)
	if err := b.UploadAsync(core.UploadAt{Buf: r.bufs[i], Data: src[:half]}); err != nil {
		return err
	}
	// A small upload into the half the second UploadAsync writes next: it
	// must land before that one, which runs on the stream held since the
	// first.
	if err := r.upload(i, half, 1+r.rng.Intn(half)); err != nil {
		return err
	}
	r.noteUnfenced(0)
	if err := b.UploadAsync(core.UploadAt{Buf: r.bufs[i], Offset: half, Data: src[half:]}); err != nil {
		return err
	}
	if err := b.SynchronizeUploads(); err != nil {
		return err
	}
	copy(r.model[i], src)
	got, err := b.Download(r.bufs[i].All(), nil)
	if err != nil {
		return err
	}
	return r.check("UploadAsync", i, got)
}
