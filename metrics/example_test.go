package metrics_test

import (
	"bufio"
	"encoding/json"
	"expvar"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/metrics"
)

// ExampleNewCollector registers a Backend's figures with Prometheus and
// scrapes them once, as a Prometheus server would scrape /metrics.
func ExampleNewCollector() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	h, err := b.Alloc(1000)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Free(h)

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(b))
	// In a service: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if l := lines.Text(); strings.HasPrefix(l, "vyrecuda_memory_allocated_bytes") || strings.HasPrefix(l, "vyrecuda_resident_allocated_bytes_total") {
			fmt.Println(l)
		}
	}
	// Output:
	// vyrecuda_memory_allocated_bytes{device="0"} 1000
	// vyrecuda_resident_allocated_bytes_total{device="0"} 1000
}

// ExamplePublish shows a Backend under /debug/vars, the page expvar's
// handler serves (net/http's default mux serves it once expvar is
// imported).
func ExamplePublish() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := metrics.Publish("vyrecuda_example", b); err != nil {
		log.Fatal(err)
	}

	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/vars")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var vars struct {
		Backend metrics.Snapshot `json:"vyrecuda_example"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
		log.Fatal(err)
	}
	fmt.Println(vars.Backend.Device.Name, "budget", vars.Backend.Memory.Budget, "uploads", vars.Backend.Telemetry.UploadOps)
	// Output: vyrecuda simulated device budget 966367641 uploads 0
}
