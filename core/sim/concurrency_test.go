package sim

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
)

func TestConcurrentUse(t *testing.T) {
	d := New(Config{TotalMemory: 64 << 20})
	shared := mustStream(t, d)
	const workers, rounds, n = 16, 20, 1024
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- worker(d, shared, byte(w), rounds, n)
		}()
	}
	// Readers of the device's own state run alongside.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			_ = d.Live().String()
			_ = d.CallCounts()
			_, _, _ = d.MemGetInfo()
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, d.StreamSynchronize(shared))
	require.NoError(t, d.StreamDestroy(shared))
	require.Equal(t, uint64(2*workers*rounds), d.Calls(OpMemAlloc))
	RequireNoLeaks(t, d)
}

// worker round-trips a pattern through its own stream, then through the
// shared stream ordered by an event, checking the bytes each time.
func worker(d *Device, shared driver.Stream, id byte, rounds, n int) error {
	s, err := d.StreamCreate()
	if err != nil {
		return err
	}
	e, err := d.EventCreate(false)
	if err != nil {
		return err
	}
	stage, err := d.HostAlloc(uint64(n))
	if err != nil {
		return err
	}
	for r := range rounds {
		p, err := d.MemAlloc(uint64(n))
		if err != nil {
			return err
		}
		want := byte(int(id)*31 + r)
		for i := range stage {
			stage[i] = want
		}
		if err := d.MemcpyHtoDAsync(p, stage, s); err != nil {
			return err
		}
		if err := d.EventRecord(e, s); err != nil {
			return err
		}
		// The shared stream copies p to p2 once s has reached e: syncing
		// shared runs this worker's s up to e first.
		p2, err := d.MemAlloc(uint64(n))
		if err != nil {
			return err
		}
		if err := d.StreamWaitEvent(shared, e); err != nil {
			return err
		}
		if err := d.MemcpyDtoDAsync(p2, p, uint64(n), shared); err != nil {
			return err
		}
		if err := d.StreamSynchronize(shared); err != nil {
			return err
		}
		clear(stage)
		if err := d.MemcpyDtoHAsync(stage, p2, s); err != nil {
			return err
		}
		if err := d.StreamSynchronize(s); err != nil {
			return err
		}
		if err := d.MemFree(p2); err != nil {
			return err
		}
		for i, b := range stage {
			if b != want {
				return fmt.Errorf("worker %d round %d: byte %d = %d, want %d", id, r, i, b, want)
			}
		}
		if err := d.MemFree(p); err != nil {
			return err
		}
	}
	if err := d.EventDestroy(e); err != nil {
		return err
	}
	if err := d.HostFree(ptrOf(stage)); err != nil {
		return err
	}
	return d.StreamDestroy(s)
}

type recordingTB struct {
	helped bool
	errors []string
}

func (r *recordingTB) Helper() { r.helped = true }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestRequireNoLeaksReportsLiveObjects(t *testing.T) {
	d := New(Config{})
	p := mustAlloc(t, d, 100)
	s := mustStream(t, d)
	require.NoError(t, d.MemsetD8Async(p, 1, 100, s))

	var tb recordingTB
	require.False(t, RequireNoLeaks(&tb, d))
	require.True(t, tb.helped)
	require.Len(t, tb.errors, 1)
	require.Contains(t, tb.errors[0], "allocations=1 (100 bytes)")
	require.Contains(t, tb.errors[0], "streams=1")
	require.Contains(t, tb.errors[0], "queued=1")
	require.False(t, d.Live().Zero())

	require.NoError(t, d.StreamSynchronize(s))
	require.NoError(t, d.StreamDestroy(s))
	require.NoError(t, d.MemFree(p))
	tb = recordingTB{}
	require.True(t, RequireNoLeaks(&tb, d))
	require.Empty(t, tb.errors)
	require.True(t, d.Live().Zero())
}
