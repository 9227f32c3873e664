package promlimit_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/adapters/promlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A limited service exports its decisions on /metrics: the Collector
// observes the limiter and the guard, and is registered like any other.
func Example() {
	backend, err := memorystore.New() // redisstore.New(client) in production
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()

	metrics, err := promlimit.New()
	if err != nil {
		log.Fatal(err)
	}
	store, err := guard.New(backend, guard.WithObserver(metrics))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(store,
		[]core.Policy{{Name: "per-client", Key: keyfunc.Header("X-Api-Key"), Limit: core.PerMinute(2)}},
		core.WithObserver(metrics))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(metrics)
	reg.MustRegister(metrics)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", httplimit.New(limiter)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/hello", nil)
		req.Header.Set("X-Api-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	fmt.Print(scrape(srv.URL+"/metrics", "sluice_decisions_total", "sluice_circuit_state"))
	// Output:
	// sluice_circuit_state 0
	// sluice_decisions_total{outcome="allowed",policy="per-client"} 1
	// sluice_decisions_total{outcome="denied",policy="per-client"} 1
	// sluice_decisions_total{outcome="warning",policy="per-client"} 1
}

// scrape returns the samples of the named metrics at url, leaving out the
// counters still at zero.
func scrape(url string, names ...string) string {
	resp, err := http.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if slices.Contains(names, name) && !(strings.HasSuffix(name, "_total") && strings.HasSuffix(line, " 0")) {
			out.WriteString(line + "\n")
		}
	}
	if err := lines.Err(); err != nil {
		log.Fatal(err)
	}
	return out.String()
}
