//go:build gpu

package core_test

import (
	"strconv"
	"testing"

	"github.com/vyre-go/vyrecuda/core"
)

// BenchmarkGPUOptimizerPoolHit is BenchmarkOptimizerPoolHit on the real
// driver: after the first round trip no iteration makes a driver call, so it
// should match the simulated figure (W4 target <= 0.5 us; PyTorch 5.2 us).
func BenchmarkGPUOptimizerPoolHit(b *testing.B) {
	be := openBench(b)
	base := be.MemoryStats().Allocated
	for _, n := range []int{4096, 1 << 20, 16 << 20} {
		d, err := core.NewOptimizerDispatcher(be)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sizeName(n), func(b *testing.B) { benchPoolHit(b, d, n) })
		if err := d.Close(); err != nil {
			b.Fatalf("dispatcher Close: %v", err)
		}
	}
	if got := be.MemoryStats().Allocated; got != base {
		b.Fatalf("resident bytes %d after the dispatchers closed, want %d", got, base)
	}
}

// TestGPUOptimizerStaticAndMemset runs the reference's static cache and
// memset cases on the real driver.
func TestGPUOptimizerStaticAndMemset(t *testing.T) {
	be, err := core.OpenCUDA(0)
	if err != nil {
		t.Fatalf("OpenCUDA: %v", err)
	}
	defer func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	base := be.MemoryStats().Allocated
	d, err := core.NewOptimizerDispatcher(be)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 768)
	for i := range payload {
		payload[i] = byte(i)
	}
	be.ResetTelemetry()
	cold, err := d.AcquireStaticUploads(1, [][]byte{payload[:256], payload[256:]})
	if err != nil {
		t.Fatal(err)
	}
	if h2d := be.Telemetry().HostToDeviceBytes; h2d != 768 || cold.CacheHit {
		t.Fatalf("cold: %d bytes uploaded, hit %v; want 768, false", h2d, cold.CacheHit)
	}
	be.ResetTelemetry()
	warm, err := d.AcquireStaticUploads(1, [][]byte{payload[:256], payload[256:]})
	if err != nil {
		t.Fatal(err)
	}
	if h2d := be.Telemetry().HostToDeviceBytes; h2d != 0 || !warm.CacheHit {
		t.Fatalf("warm: %d bytes uploaded, hit %v; want 0, true", h2d, warm.CacheHit)
	}
	id, err := d.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	be.ResetTelemetry()
	out, err := be.Run(core.Batch{Fills: []core.Fill{{Buf: id, Value: 0xA5}},
		Reads: []core.Range{{Buf: id, Len: 64}, {Buf: warm.Bufs[1], Len: 512}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range out[0] {
		if v != 0xA5 {
			t.Fatalf("fill left %#x", v)
		}
	}
	if string(out[1]) != string(payload[256:]) {
		t.Fatal("static buffer does not hold its payload")
	}
	if h2d := be.Telemetry().HostToDeviceBytes; h2d != 0 {
		t.Fatalf("fill moved %d bytes host to device", h2d)
	}
	for _, s := range []core.StaticSet{cold, warm} {
		if err := d.ReleaseStaticUploads(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := be.MemoryStats().Allocated; got != base {
		t.Fatalf("resident bytes %d after Close, want %d", got, base)
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
