package core_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestConcurrentMixedOperations runs 16 goroutines doing every kind of
// operation at once on one Backend: allocation, uploads of every form,
// readbacks of every form, async uploads from pinned memory, refused frees,
// and telemetry reads. Each goroutine checks the bytes it reads against its
// own model; the race detector checks the locking.
func TestConcurrentMixedOperations(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: 256 << 20}, core.WithPinnedPoolCap(1<<20))
	shared, err := b.Alloc(1000)
	require.NoError(t, err)
	sharedData := randomBytes(rand.New(rand.NewSource(99)), 1000)
	require.NoError(t, b.Upload(core.UploadAt{Buf: shared, Data: sharedData}))

	const workers, rounds = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker(b, shared, sharedData, int64(w), rounds); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, uint64(1000), b.MemoryStats().Allocated, "every worker freed what it allocated")
	assert.Zero(t, b.LaunchResourceCounts().Leases)
	require.NoError(t, b.Free(shared))
}

func worker(b *core.Backend, shared core.Buffer, sharedData []byte, seed int64, rounds int) error {
	r := rand.New(rand.NewSource(seed))
	pinned, err := b.AllocHostPinned(512)
	if err != nil {
		return err
	}
	defer pinned.Free()
	var dst [][]byte
	for round := range rounds {
		n1, n2 := 1+r.Intn(5000), 1+r.Intn(300)
		h1, err := b.Alloc(n1)
		if err != nil {
			return err
		}
		h2, err := b.Alloc(n2)
		if err != nil {
			return err
		}
		m1, m2 := randomBytes(r, n1), randomBytes(r, n2)
		if err := b.Upload(core.UploadAt{Buf: h1, Data: m1}, core.UploadAt{Buf: h2, Data: m2}); err != nil {
			return err
		}
		off := r.Intn(n1)
		patch := randomBytes(r, r.Intn(n1-off+1))
		copy(m1[off:], patch)
		if err := b.Upload(core.UploadAt{Buf: h1, Offset: off, Data: patch}); err != nil {
			return err
		}
		if round%3 == 0 {
			k := r.Intn(min(n2, 512) + 1)
			copy(pinned.Bytes(), randomBytes(r, k))
			copy(m2, pinned.Bytes()[:k])
			if err := b.UploadAsync(core.UploadAt{Buf: h2, Offset: 0, Data: pinned.Bytes()[:k]}); err != nil {
				return err
			}
			// No in-flight check here: another worker's SynchronizeUploads
			// may already have completed this upload.
			if err := b.SynchronizeUploads(); err != nil {
				return err
			}
		}
		dst, err = b.DownloadMany(allOf([]core.Buffer{h1, h2, shared}), dst)
		if err != nil {
			return err
		}
		if !bytes.Equal(dst[0], m1) || !bytes.Equal(dst[1], m2) || !bytes.Equal(dst[2], sharedData) {
			return fmt.Errorf("round %d: bytes read differ from the model", round)
		}
		ro := r.Intn(1000)
		rl := r.Intn(1000 - ro + 1)
		rs, err := b.DownloadMany([]core.Range{shared.Slice(ro, rl), h1.All(), h2.Slice(0, 0)}, nil)
		if err != nil {
			return err
		}
		if !bytes.Equal(nonNil(rs[0]), sharedData[ro:ro+rl]) || !bytes.Equal(rs[1], m1) || len(rs[2]) != 0 {
			return fmt.Errorf("round %d: ranged bytes differ from the model", round)
		}
		if err := b.Free(core.Buffer{ID: shared.ID, Len: 999}); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("drifted free: want ErrUnknownHandle, got %v", err)
		}
		_ = b.Telemetry()
		_ = b.LaunchResourceCounts()
		if err := b.Free(h1); err != nil {
			return err
		}
		if err := b.Free(h2); err != nil {
			return err
		}
		if err := b.Free(h1); !errors.Is(err, core.ErrUnknownHandle) {
			return fmt.Errorf("second free: want ErrUnknownHandle, got %v", err)
		}
	}
	return nil
}

// TestCloseWaitsForRunningCalls closes while other goroutines keep calling:
// every call either completes normally or reports ErrClosed, and nothing
// leaks (the cleanup's leak check).
func TestCloseWaitsForRunningCalls(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 50 {
				_, err := b.Download(h.All(), nil)
				if errors.Is(err, core.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Download: %v", err)
					return
				}
			}
		}()
	}
	close(start)
	require.NoError(t, b.Close())
	wg.Wait()
}
