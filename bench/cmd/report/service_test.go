package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// fakeRun is a closed-loop run of n checks in one second costing server,
// redis and load µs of CPU per check, with latencies p99/3, p99 and 2·p99.
func fakeRun(n int64, server, redis, load float64, p99 time.Duration) servicebench.Sample {
	us := func(v float64) time.Duration { return time.Duration(v * float64(n) * 1e3) }
	return servicebench.Sample{Calls: n, Checks: n, Elapsed: time.Second, PerSec: float64(n),
		P50: p99 / 3, P99: p99, P999: 2 * p99, ServerCPU: us(server), RedisCPU: us(redis), LoadCPU: us(load)}
}

// fakeOpen is an open-loop run at 3000 calls/s whose calls took p50 (98%)
// and p99 (2%).
func fakeOpen(p50, p99 time.Duration) servicebench.Sample {
	var h redisbench.Histogram
	for i := range 3000 {
		d := p50
		if i%50 == 0 {
			d = p99
		}
		h.Record(d)
	}
	return servicebench.Sample{Calls: 3000, Checks: 3000, Elapsed: time.Second, Offered: 3000, Latency: &h,
		P50: h.Quantile(0.5), P99: h.Quantile(0.99), P999: h.Quantile(0.999), SentP99: p99, LagP99: 50 * time.Microsecond, MaxInFlight: 7}
}

// impls returns the implementations by name.
func impls() map[string]servicebench.Impl {
	byName := map[string]servicebench.Impl{}
	for _, im := range servicebench.Impls() {
		byName[im.Name] = im
	}
	return byName
}

// fakeServiceRow is a row with one closed-loop run per round, costing
// server[round] µs of server CPU per check.
func fakeServiceRow(name string, server []float64, redis float64) serviceRow {
	r := serviceRow{impl: impls()[name]}
	for i, s := range server {
		checks := int64(1e6 / (s + redis + 20))
		r.samples = append(r.samples, fakeRun(checks, s, redis, 20, 8*time.Millisecond))
		r.rounds = append(r.rounds, i)
	}
	return r
}

// fakeService is a service section with made-up results over three rounds.
func fakeService() *serviceSection {
	rows := []serviceRow{
		fakeServiceRow(envoyDefaultImpl, []float64{120, 110, 130}, 8),
		fakeServiceRow(envoyBestImpl, []float64{100, 80, 120}, 10),
		fakeServiceRow(floorImpl, []float64{30, 25, 35}, 0),
		// ÷ best per round: 0.55, 0.625, 0.583; ÷ floor 1.83, 2, 2.
		fakeServiceRow(ratelimitdRedis, []float64{55, 50, 70}, 9),
		{impl: impls()[ratelimitdMemory], skipped: "ratelimitd: service/cmd/ratelimitd not found"},
		fakeServiceRow(floorNativeImpl, []float64{20, 20, 20}, 0),
		fakeServiceRow(nativeRedisImpl, []float64{28, 28, 28}, 12),
		fakeServiceRow(nativeMemoryImpl, []float64{25, 25, 25}, 0),
		fakeServiceRow(batchMemoryImpl, []float64{2, 2.5, 1.8}, 0), // 500k, 400k, 556k per CPU-second
		fakeServiceRow(batchRedisImpl, []float64{8, 8, 8}, 4),      // 125k
		fakeServiceRow(httpRedisImpl, []float64{35, 35, 35}, 12),   // 1.25× native
		fakeServiceRow(httpMemoryImpl, []float64{40, 40, 40}, 0),   // 1.6×
		{impl: impls()[remoteImpl], failed: "remotestore: connection refused"},
	}
	rl := &rows[3]
	rl.open = []servicebench.Sample{fakeOpen(time.Millisecond, 3*time.Millisecond), fakeOpen(time.Millisecond, 4*time.Millisecond), fakeOpen(time.Millisecond, 6*time.Millisecond)}
	rl.openRounds = []int{0, 1, 2}
	nat := &rows[6]
	nat.open = []servicebench.Sample{fakeOpen(time.Millisecond, 7*time.Millisecond)}
	nat.openRounds = []int{0}
	for i := range rows {
		rows[i].aggregate()
	}
	return &serviceSection{opts: serviceOptions{count: 3, callers: 64, conns: 4, measure: 2 * time.Second, warmup: 500 * time.Millisecond, openRate: 3000, openTime: 2 * time.Second},
		rows: rows, version: "7.0.15", grpcRatelimitd: "v1.84.0", grpcFloor: "v1.84.0"}
}

func TestRotation(t *testing.T) {
	order := rotation(5, 7)
	require.Len(t, order, 7)
	for rep, round := range order {
		sorted := slices.Sorted(slices.Values(round))
		require.Equal(t, []int{0, 1, 2, 3, 4}, sorted, "round %d runs every run once", rep)
		require.Equal(t, rep%5, round[0], "round %d starts one further", rep)
		for j := 1; j < len(round); j++ {
			require.Equal(t, (round[j-1]+1)%5, round[j], "round robin")
		}
	}
	for run := range 5 {
		var places []int
		for _, round := range order[:5] {
			places = append(places, slices.Index(round, run))
		}
		require.ElementsMatch(t, []int{0, 1, 2, 3, 4}, places, "over 5 rounds run %d takes every place once", run)
	}
}

func TestRuns(t *testing.T) {
	sec := fakeService()
	rs := runs(sec.rows)
	var closed, open []string
	for _, r := range rs {
		if r.open {
			open = append(open, sec.rows[r.row].impl.Name)
		} else {
			closed = append(closed, sec.rows[r.row].impl.Name)
		}
	}
	require.Len(t, closed, len(sec.rows), "every row closed loop")
	require.Equal(t, []string{envoyDefaultImpl, envoyBestImpl, floorImpl, ratelimitdRedis, ratelimitdMemory, floorNativeImpl, nativeRedisImpl}, open,
		"the ShouldRateLimit servers and the native check on Redis with its floor")
}

func TestRoundRatio(t *testing.T) {
	a := fakeServiceRow(ratelimitdRedis, []float64{10, 30, 20, 40}, 0)
	b := fakeServiceRow(envoyBestImpl, []float64{20, 20, 40}, 0)
	// b missed round 1: its third run is round 3's.
	b.rounds = []int{0, 2, 3}
	sp := roundRatio(&a, &b, serverUs)
	require.Equal(t, 3, sp.n, "rounds 0, 2 and 3 have both")
	require.InDelta(t, 0.5, sp.lo, 1e-9)  // 10/20
	require.InDelta(t, 1.0, sp.med, 1e-9) // 20/20
	require.InDelta(t, 1.0, sp.hi, 1e-9)  // 40/40
	b.rounds = []int{4, 5, 6}
	require.Zero(t, roundRatio(&a, &b, serverUs).n, "no common round")
	// A ratio of medians would hide the pairing: a's median 25, b's 20.
	require.InDelta(t, 25.0, a.figure(serverUs).med, 1e-6)
}

func TestPerServerSecond(t *testing.T) {
	s := fakeRun(1000, 2, 0, 0, time.Millisecond)
	require.InDelta(t, 500_000, perServerSecond(s), 1e-6)
	require.Zero(t, perServerSecond(servicebench.Sample{Checks: 10}), "no CPU measured: no figure")
}

func TestAggregateOpen(t *testing.T) {
	st := aggregateOpen([]servicebench.Sample{fakeOpen(time.Millisecond, 3*time.Millisecond), fakeOpen(time.Millisecond, 9*time.Millisecond)})
	require.Equal(t, 2, st.runs)
	require.InDelta(t, 3000, st.achieved, 1e-9)
	require.InDelta(t, float64(time.Millisecond), float64(st.p50), 0.02*float64(time.Millisecond))
	require.InDelta(t, float64(6*time.Millisecond), float64(st.p99), 0.02*float64(6*time.Millisecond), "the median of the runs' p99s, 3 and 9 ms")
	require.InDelta(t, float64(3*time.Millisecond), float64(st.all99), 0.02*float64(3*time.Millisecond), "of all calls together 1% took 3 ms, 1% 9 ms")
	require.InDelta(t, float64(9*time.Millisecond), float64(st.max), 0.02*float64(9*time.Millisecond))
	require.Less(t, st.p99Lo, st.p99Hi)
	require.Equal(t, int64(7), st.maxInFlight)
	require.Zero(t, aggregateOpen(nil).runs)
}

// serviceTarget returns the target whose name contains all of parts.
func serviceTarget(t *testing.T, ts []target, parts ...string) target {
	t.Helper()
	for _, tg := range ts {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(tg.name, p) }) {
			return tg
		}
	}
	t.Fatalf("no target with %q", parts)
	return target{}
}

func TestServiceTargets(t *testing.T) {
	ts := fakeService().targets()
	require.Len(t, ts, 12)

	best := serviceTarget(t, ts, "ShouldRateLimit", "server CPU", "best configuration")
	require.InDelta(t, 0.583, best.ratio, 1e-3, "the median of the per-round ratios")
	require.True(t, best.met)
	require.True(t, best.close, "round 1 (0.625) is above 0.6")
	require.Equal(t, "met (runs overlap)", best.verdict())
	require.Contains(t, best.measured, "per round 0.55–0.62× over 3 rounds")

	floor := serviceTarget(t, ts, "ShouldRateLimit", "floor")
	require.InDelta(t, 2.0, floor.ratio, 1e-9)
	require.False(t, floor.met)
	require.False(t, floor.close)

	redis := serviceTarget(t, ts, "ShouldRateLimit", "Redis CPU")
	require.InDelta(t, 0.9, redis.ratio, 1e-9)
	require.True(t, redis.met)

	p99 := serviceTarget(t, ts, "ShouldRateLimit", "p99")
	require.InDelta(t, 4.0/5, p99.ratio, 0.02, "the median of the open-loop runs' p99s: 3, 4 and 6 ms")
	require.True(t, p99.met)
	require.True(t, p99.close, "one run's p99 was over 5 ms")
	require.Contains(t, p99.name, "open loop: 3000 calls/s offered, at most 64 in flight")
	require.Contains(t, p99.why, "Little's law")

	require.True(t, serviceTarget(t, ts, "native CheckRateLimit", "floor").met, "28 ÷ 20 = 1.4")
	nativeP99 := serviceTarget(t, ts, "native CheckRateLimit", "p99")
	require.False(t, nativeP99.met)
	require.Contains(t, nativeP99.measured, "median of 1 run")

	httpRedis := serviceTarget(t, ts, "HTTP JSON check on Redis")
	require.InDelta(t, 1.25, httpRedis.ratio, 1e-9)
	require.True(t, httpRedis.met)
	require.False(t, serviceTarget(t, ts, "HTTP JSON check on memory").met)

	bm := serviceTarget(t, ts, "CheckRateLimitBatch", "memory")
	require.InDelta(t, 500_000.0/400_000, bm.ratio, 1e-6)
	require.True(t, bm.met)
	require.True(t, bm.close, "the 2.5 µs round made exactly 400k")
	br := serviceTarget(t, ts, "CheckRateLimitBatch", "Redis")
	require.False(t, br.met)
	require.Contains(t, br.measured, "125k decisions per server CPU-second")

	sec := fakeService()
	sec.rows[1] = serviceRow{impl: sec.rows[1].impl, failed: "envoyproxy/ratelimit exited"}
	ts = sec.targets()
	miss := serviceTarget(t, ts, "ShouldRateLimit", "best configuration")
	require.Equal(t, "not measured", miss.verdict())
	require.Contains(t, miss.missing, "envoyproxy/ratelimit exited")
	require.True(t, serviceTarget(t, ts, "ShouldRateLimit", "floor").missing == "", "the floor's target stands alone")

	for _, tg := range fakeService().targets() {
		require.NotContains(t, tg.name, "checks/s", "throughput is no target: CPU per check is the measure")
	}
}

func TestServiceChart(t *testing.T) {
	bars := fakeService().chartRows()
	require.Len(t, bars, 12)
	for _, b := range bars {
		require.Equal(t, "service", b.group)
		require.NotEmpty(t, b.label)
		require.Positive(t, b.target)
	}
	require.InDelta(t, 1/0.583, bars[0].value, 1e-2, "an advantage: envoy best's CPU ÷ ratelimitd's")
	require.InDelta(t, 1/0.6, bars[0].target, 1e-9)
	require.True(t, bars[0].met())
	require.InDelta(t, 1/1.5, bars[1].target, 1e-9)
	require.False(t, bars[1].met())
}

func TestServiceMarkdown(t *testing.T) {
	r := fakeReport(90)
	r.service = fakeService()
	rl := &r.service.rows[3]
	rl.profile = &servicebench.Breakdown{Total: 2 * time.Second, Duration: 3 * time.Second,
		Shares: []servicebench.Share{{Category: "gRPC and HTTP/2", Fraction: 0.5}, {Category: "decision", Fraction: 0.25}, {Category: servicebench.RuntimeCategory, Fraction: 0.25}},
		Top:    []servicebench.Share{{Category: "syscall.write", Fraction: 0.2}}}
	r.service.rows[2].profile = &servicebench.Breakdown{Total: time.Second, Duration: 3 * time.Second,
		Shares: []servicebench.Share{{Category: "gRPC and HTTP/2", Fraction: 0.9}, {Category: servicebench.RuntimeCategory, Fraction: 0.1}}}
	// At 3000 checks a run: 30, 40 and 60 µs of server CPU per check, 5
	// and 4 µs of redis-server's.
	for name, cpu := range map[string][2]time.Duration{floorImpl: {90 * time.Millisecond, 0}, envoyBestImpl: {180 * time.Millisecond, 15 * time.Millisecond}, ratelimitdRedis: {120 * time.Millisecond, 12 * time.Millisecond}} {
		row := r.service.find(name)
		o := fakeOpen(time.Millisecond, 3*time.Millisecond)
		o.ServerCPU, o.RedisCPU = cpu[0], cpu[1]
		row.open, row.openRounds = []servicebench.Sample{o}, []int{0}
		row.aggregate()
	}
	var b bytes.Buffer
	r.write(&b)
	md := b.String()
	for _, want := range []string{
		"At the same offered rate, `ratelimitd-redis` spent 1.33× the server CPU per check of `grpc-floor`, 0.67× `envoy-ratelimit-best`'s, and 0.80× its redis-server CPU",
		"| 40.0 | 4.0 |",
		"## The rate-limit service: ratelimitd, envoyproxy/ratelimit and the grpc-go floor, 64 concurrent callers",
		"| **`ratelimitd-redis`** | ratelimitd | Redis |", "| 55.0 (50.0–70.0) |",
		"| `ratelimitd-redis` | 0.58× (0.55–0.62) | 2.00× (1.83–2.00) |",
		"skipped: ratelimitd: service/cmd/ratelimitd not found", "FAILED: remotestore: connection refused",
		"### CheckRateLimitBatch of 100 checks", "| **`ratelimitd-memory-batch100`** | memory |", "500000 (400000–555556)",
		"### The HTTP JSON check", "| `ratelimitd-redis-http` ÷ `ratelimitd-redis-native` | 1.25× |",
		"### Latency at a fixed offered rate (open loop)", "**The open-loop p99 answers \"p99 < 5 ms at 64 callers\"**",
		"### envoyproxy/ratelimit's configurations", "REDIS_PIPELINE_WINDOW", "Cluster",
		"both link grpc-go v1.84.0", "TestServerOptionsInStep",
		"### Where ratelimitd's CPU goes", "| gRPC and HTTP/2 | 90% (27.0) | 50% (27.5) |",
		"#### What is left against the floor", "`ratelimitd-redis` spends 25.0 µs per check beyond `grpc-floor` (1.83× its CPU)",
		"- `syscall.write` 20.0%", "#### Why what is left is left", "- **Redis CPU.**",
		"ShouldRateLimit on Redis: ratelimitd's server CPU per check at most 0.6× envoyproxy/ratelimit's best configuration's | 0.58× | ≤ 0.60× | **met (runs overlap)** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown lacks %q", want)
		}
	}
	require.NotContains(t, md, "at least 5×", "the throughput target is gone")
	requireTables(t, md)

	r.service.grpcFloor = "v1.85.0"
	b.Reset()
	r.write(&b)
	require.Contains(t, b.String(), "**grpc-go v1.84.0 in ratelimitd but v1.85.0 in the floor")
}
