package metrics_test

import (
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/metrics"
)

const testMemory = 64 << 20

var quiet = slog.New(slog.DiscardHandler)

// openSim opens a Backend on a simulated device of the given ordinal,
// closed (and checked for leaks) when the test ends.
func openSim(t *testing.T, ordinal int) *core.Backend {
	t.Helper()
	dev := sim.New(sim.Config{TotalMemory: testMemory, Ordinal: ordinal})
	b, err := core.Open(dev, core.WithLogger(quiet))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, b.Close())
		sim.RequireNoLeaks(t, dev)
	})
	return b
}

// uploadOnce allocates n bytes and uploads them, returning the buffer.
func uploadOnce(t *testing.T, b *core.Backend, n int) core.Buffer {
	t.Helper()
	h, err := b.Alloc(n)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, n)}))
	return h
}

func TestCollectorExportsTheBackendsFigures(t *testing.T) {
	b := openSim(t, 0)
	h := uploadOnce(t, b, 100)
	c := metrics.NewCollector(b)
	expected := `
# HELP vyrecuda_memory_allocated_bytes Bytes of live resident buffers, as requested.
# TYPE vyrecuda_memory_allocated_bytes gauge
vyrecuda_memory_allocated_bytes{device="0"} 100
# HELP vyrecuda_transfer_host_to_device_bytes_total Bytes copied host to device.
# TYPE vyrecuda_transfer_host_to_device_bytes_total counter
vyrecuda_transfer_host_to_device_bytes_total{device="0"} 100
# HELP vyrecuda_transfer_uploads_total Upload calls that moved at least one byte.
# TYPE vyrecuda_transfer_uploads_total counter
vyrecuda_transfer_uploads_total{device="0"} 1
# HELP vyrecuda_device_memory_bytes Total memory of the device.
# TYPE vyrecuda_device_memory_bytes gauge
vyrecuda_device_memory_bytes{device="0"} 6.7108864e+07
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(expected),
		"vyrecuda_memory_allocated_bytes", "vyrecuda_transfer_host_to_device_bytes_total",
		"vyrecuda_transfer_uploads_total", "vyrecuda_device_memory_bytes"))

	// Each scrape reads the Backend again.
	require.NoError(t, b.Free(h))
	assert.Equal(t, 0.0, gauge(t, c, "vyrecuda_memory_allocated_bytes", "0"))
	assert.Equal(t, float64(b.MemoryStats().Reserved), gauge(t, c, "vyrecuda_memory_reserved_bytes", "0"))
	assert.Equal(t, float64(b.MemoryStats().CachedDevice), gauge(t, c, "vyrecuda_memory_cached_device_bytes", "0"))
	assert.Positive(t, gauge(t, c, "vyrecuda_memory_cached_device_bytes", "0"), "the freed block is cached")
}

// gauge returns the value of one series of c.
func gauge(t *testing.T, c prometheus.Collector, name, device string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == device {
				if f.GetType().String() == "COUNTER" {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{device=%q}", name, device)
	return 0
}

func TestCollectorPassesTheLinter(t *testing.T) {
	b := openSim(t, 0)
	uploadOnce(t, b, 64)
	problems, err := testutil.CollectAndLint(metrics.NewCollector(b))
	require.NoError(t, err)
	assert.Empty(t, problems)

	valid := regexp.MustCompile(`^vyrecuda_[a-z0-9_]+$`)
	for _, n := range metrics.Names() {
		assert.Regexp(t, valid, n)
	}
	assert.Equal(t, len(metrics.Names()), testutil.CollectAndCount(metrics.NewCollector(b)), "one series per metric for one Backend")
}

func TestCollectorLabelsEveryBackendApart(t *testing.T) {
	a, b, c := openSim(t, 0), openSim(t, 1), openSim(t, 0)
	uploadOnce(t, a, 10)
	uploadOnce(t, b, 20)
	uploadOnce(t, c, 30)
	col := metrics.NewCollector(a, nil, b, c)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col), "descriptors are consistent")
	_, err := reg.Gather()
	require.NoError(t, err, "no two series collide")
	assert.Equal(t, 3*len(metrics.Names()), testutil.CollectAndCount(col))
	for dev, want := range map[string]float64{"0": 10, "1": 20, "0#2": 30} {
		assert.Equal(t, want, gauge(t, col, "vyrecuda_transfer_host_to_device_bytes_total", dev), dev)
	}
	assert.Zero(t, testutil.CollectAndCount(metrics.NewCollector()), "no Backend, no series")
}

func TestPublishServesTheSnapshotOverExpvar(t *testing.T) {
	b := openSim(t, 3)
	h := uploadOnce(t, b, 48)
	name := "vyrecuda_test_" + strings.ReplaceAll(t.Name(), "/", "_")
	require.NoError(t, metrics.Publish(name, b))

	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	read := func() metrics.Snapshot {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var vars map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &vars))
		require.Contains(t, vars, name)
		var s metrics.Snapshot
		require.NoError(t, json.Unmarshal(vars[name], &s))
		return s
	}
	s := read()
	assert.Equal(t, 3, s.Device.Ordinal)
	assert.Equal(t, uint64(48), s.Memory.Allocated)
	assert.Equal(t, uint64(48), s.Telemetry.HostToDeviceBytes)
	assert.Equal(t, b.MemoryStats(), s.Memory)

	require.NoError(t, b.Free(h))
	assert.Zero(t, read().Memory.Allocated, "each read takes a new snapshot")

	err := metrics.Publish(name, b)
	requireInvalid(t, err, "already exists")
}

func TestPublishRefusesBadInput(t *testing.T) {
	b := openSim(t, 0)
	requireInvalid(t, metrics.Publish("", b), "empty")
	requireInvalid(t, metrics.Publish("vyrecuda_nil_backend", nil), "nil")
	assert.Nil(t, expvar.Get("vyrecuda_nil_backend"), "a refusal publishes nothing")
	assert.Equal(t, metrics.Snapshot{}, metrics.Take(nil))
}

func requireInvalid(t *testing.T, err error, fragment string) {
	t.Helper()
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	var ce *core.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "metrics.Publish", ce.Op)
	assert.Contains(t, err.Error(), fragment)
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix: "), fmt.Sprint(err))
}
