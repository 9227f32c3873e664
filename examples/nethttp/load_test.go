package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/examples/internal/demo"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Environment of TestLoad.
const (
	// loadDurationEnv sets how long the clients run (default 5s; `make load`
	// runs 30s).
	loadDurationEnv = "SLUICE_LOAD_DURATION"
	// loadClientsEnv sets the number of concurrent clients (default 200).
	loadClientsEnv = "SLUICE_LOAD_CLIENTS"
	// loadPaceEnv sets the pause of each client between two requests
	// (default 0: as fast as the server answers).
	loadPaceEnv = "SLUICE_LOAD_PACE"
)

// histogram counts durations in buckets about 5% wide, so that a run of
// any length holds a fixed amount of memory.
type histogram struct {
	buckets [512]atomic.Uint64
	max     atomic.Int64
}

const bucketsPerE = 20.5 // 1/ln(1.05)

func (h *histogram) add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us >= 1 {
		i = min(len(h.buckets)-1, 1+int(math.Log(us)*bucketsPerE))
	}
	h.buckets[i].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= want && seen > 0 {
			if i == 0 {
				return time.Microsecond
			}
			return time.Duration(math.Exp(float64(i)/bucketsPerE) * float64(time.Microsecond))
		}
	}
	return time.Duration(h.max.Load())
}

// sample is the process's state at one instant of the run.
type sample struct {
	heapInuse  uint64
	goroutines int
}

// thirds returns the median heap and goroutine count of the first and the
// last third of samples.
func thirds(ss []sample) (first, last sample) {
	n := len(ss) / 3
	median := func(ss []sample) sample {
		heap := make([]uint64, len(ss))
		gs := make([]int, len(ss))
		for i, s := range ss {
			heap[i], gs[i] = s.heapInuse, s.goroutines
		}
		slices.Sort(heap)
		slices.Sort(gs)
		return sample{heapInuse: heap[len(heap)/2], goroutines: gs[len(gs)/2]}
	}
	return median(ss[:n]), median(ss[len(ss)-n:])
}

func envOr[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	require.NoError(t, err, "%s=%q", name, v)
	return x
}

// loopbackSources returns n distinct loopback addresses to dial from, so
// that every client is an identity of its own (Linux routes all of
// 127.0.0.0/8 to lo), or nil where only 127.0.0.1 can be bound.
func loopbackSources(n int) []net.IP {
	ips := make([]net.IP, n)
	for i := range ips {
		ips[i] = net.IPv4(127, 0, 1+byte(i/250), 1+byte(i%250))
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ips[0].String(), "0"))
	if err != nil {
		return nil
	}
	l.Close()
	return ips
}

// 200 concurrent clients (each its own client IP, so its own identity) run
// against the net/http example with its Redis store for 5 s (30 s under
// `make load`): no response is a 5xx (a request the limiter could not
// decide would be answered 503), no request fails, the heap and the
// goroutines stay flat, and every goroutine is gone afterwards. The p99 of
// a request is reported, with who made the decisions (Redis, the deny
// cache, the local fallback). Every client asks as fast as it can unless
// SLUICE_LOAD_PACE sets a pause, so after its first 10 requests per minute
// most answers are 429s.
func TestLoad(t *testing.T) {
	dur := envOr(t, loadDurationEnv, 5*time.Second, time.ParseDuration)
	clients := envOr(t, loadClientsEnv, 200, strconv.Atoi)
	pace := envOr(t, loadPaceEnv, time.Duration(0), time.ParseDuration)

	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	before := runtime.NumGoroutine()
	t.Setenv("REDIS_ADDR", srv.Addr)
	store, _, closeStore := demo.Store()
	gs, ok := store.(*guard.Store)
	require.True(t, ok, "the example guards its Redis store, got %T", store)
	hello, login := demo.HelloAndLogin(store)
	var undecided atomic.Int64
	handler := routes(hello, login, httplimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, _ error) bool {
		undecided.Add(1)
		http.Error(w, "rate limiter failed", http.StatusServiceUnavailable)
		return false
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	url := "http://" + ln.Addr().String()

	sources := loopbackSources(clients)
	var lat histogram
	var status [6]atomic.Int64 // by hundreds: 2xx at 2, 4xx at 4, 5xx at 5
	var ok200, tooMany, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	transports := make([]*http.Transport, clients)
	for c := range clients {
		d := &net.Dialer{Timeout: 5 * time.Second}
		if sources != nil {
			d.LocalAddr = &net.TCPAddr{IP: sources[c]}
		}
		transports[c] = &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, DisableCompression: true}
		hc := &http.Client{Transport: transports[c], Timeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := "/hello"
				switch i % 10 {
				case 8:
					path = "/login"
				case 9:
					path = "/healthz"
				}
				start := time.Now()
				resp, err := hc.Get(url + path)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				lat.add(time.Since(start))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				status[min(resp.StatusCode/100, 5)].Add(1)
				switch resp.StatusCode {
				case http.StatusOK:
					ok200.Add(1)
				case http.StatusTooManyRequests:
					tooMany.Add(1)
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		}()
	}

	// Sample the heap and the goroutines, after a warm-up of a tenth of
	// the run (connections opening, first keys written).
	var samples []sample
	start := time.Now()
	tick := time.NewTicker(max(dur/60, 50*time.Millisecond))
	for now := range tick.C {
		if now.Sub(start) >= dur {
			break
		}
		if now.Sub(start) < dur/10 {
			continue
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{heapInuse: ms.HeapInuse, goroutines: runtime.NumGoroutine()})
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)

	total := status[2].Load() + status[4].Load() + status[5].Load() + status[1].Load() + status[3].Load() + failed.Load()
	first, last := thirds(samples)
	stats := gs.Stats()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	t.Logf("%d clients (distinct IPs: %v, pause %s) for %s: %d requests (%.0f/s): 200=%d 429=%d other 4xx=%d 5xx=%d errors=%d",
		clients, sources != nil, pace, elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(),
		ok200.Load(), tooMany.Load(), status[4].Load()-tooMany.Load(), status[5].Load(), failed.Load())
	t.Logf("latency p50=%s p90=%s p99=%s p99.9=%s max=%s (buckets 5%% wide)",
		lat.quantile(0.5), lat.quantile(0.9), lat.quantile(0.99), lat.quantile(0.999), time.Duration(lat.max.Load()))
	t.Logf("heap in use (median) first third %.1f MiB, last third %.1f MiB; goroutines (median) first %d, last %d; %d samples",
		float64(first.heapInuse)/(1<<20), float64(last.heapInuse)/(1<<20), first.goroutines, last.goroutines, len(samples))
	decisions := stats.BackendCalls - stats.Failures + stats.DenyCacheHits + stats.Degraded
	share := func(n uint64) float64 { return 100 * float64(n) / float64(max(decisions, 1)) }
	t.Logf("decisions: %d by Redis (%.1f%%), %d by the deny cache (%.1f%%), %d by the local fallback (%.1f%%); %d Redis calls failed; circuit %s; scripts Redis ran: %s",
		stats.BackendCalls-stats.Failures, share(stats.BackendCalls-stats.Failures), stats.DenyCacheHits, share(stats.DenyCacheHits),
		stats.Degraded, share(stats.Degraded), stats.Failures, gs.Circuit(), scriptCalls(info))

	require.Zero(t, failed.Load(), "requests failed: first error %v", firstErr.Load())
	require.Zero(t, status[5].Load(), "5xx responses")
	require.Zero(t, undecided.Load(), "requests the limiter could not decide")
	require.Positive(t, ok200.Load())
	require.Positive(t, tooMany.Load())
	require.GreaterOrEqual(t, len(samples), 9)
	require.LessOrEqual(t, last.heapInuse, first.heapInuse+first.heapInuse/2+4<<20, "the heap stays flat")
	require.LessOrEqual(t, last.goroutines, first.goroutines+first.goroutines/20+10, "the goroutines stay flat")

	// Shut everything down: no goroutine is left behind.
	require.NoError(t, server.Shutdown(context.Background()))
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
	closeStore()
	// +1: Eventually runs the condition on a goroutine of its own.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+1 }, 5*time.Second, 20*time.Millisecond, "goroutines left behind")
}

// scriptCalls sums the calls of the script commands in an INFO
// commandstats reply.
func scriptCalls(info string) string {
	var parts []string
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch cmd := strings.TrimPrefix(name, "cmdstat_"); cmd {
		case "evalsha", "eval", "fcall", "evalsha_ro", "fcall_ro":
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			parts = append(parts, cmd+"="+calls)
		}
	}
	return fmt.Sprint(parts)
}
