package attack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

func routes(a adapter, names ...string) core.Match {
	m := core.Match{}
	for _, n := range names {
		m.Routes = append(m.Routes, a.path(n))
	}
	return m
}

// TestIdempotencyBypass: an idempotency key admitted on one request must not
// let a different request through uncounted (another route, another method,
// a higher cost), and concurrent repeats of one request pass at most
// MaxRepeats times.
func TestIdempotencyBypass(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		s := st.open(t)
		key := ip(t)
		post := []string{http.MethodPost}
		l := newLimiter(t, s, []core.Policy{
			// A generous global floor first: every request matches it, so
			// a record bound only to the first policy's identity is shared
			// by every route, method and cost.
			{Name: "global", Key: key, Limit: core.PerHour(100_000)},
			{Name: "cheap", Key: key, Limit: core.PerHour(1000), Match: routes(a, "cheap")},
			{Name: "login", Key: key, Limit: core.PerHour(1), Match: routes(a, "login")},
			{Name: "reads", Key: key, Limit: core.PerHour(1000), Match: core.Match{Routes: []string{a.path("form")}, Methods: []string{http.MethodGet}}},
			{Name: "writes", Key: key, Limit: core.PerHour(1), Match: core.Match{Routes: []string{a.path("form")}, Methods: post}},
			{Name: "bulk", Key: key, Limit: core.PerHour(3), Match: routes(a, "bulk")},
			{Name: "hot", Key: key, Limit: core.PerHour(1), Match: routes(a, "hot")},
		}, core.WithIdempotency(core.Idempotency{MaxRepeats: 3}))
		srv := a.start(t, spec{limiter: l, routes: []string{"cheap", "login", "form", "bulk", "hot"}, cost: true})
		do := func(t *testing.T, c client, method, route, idem string, cost int) int {
			st, err := c.do(context.Background(), request{method: method, path: a.path(route),
				header: map[string]string{"X-Idempotency-Key": idem, "X-Cost": strconv.Itoa(cost)}})
			require.NoError(t, err)
			return st
		}
		// The scenarios use their own routes and policies, so none affects
		// another.
		t.Run("other-route", func(t *testing.T) {
			// A key admitted on a cheap route, reused on a throttled one:
			// each throttled request is a new request, counted.
			c := srv.newClient()
			defer c.close()
			for i := range 20 {
				k := fmt.Sprintf("route-%d", i)
				require.Equal(t, http.StatusOK, do(t, c, http.MethodPost, "cheap", k, 1))
				do(t, c, http.MethodPost, "login", k, 1)
			}
			require.LessOrEqual(t, srv.run("login"), int64(1), "the 1/hour login handler ran more often than its limit")
		})
		if !a.grpc { // every gRPC call is a POST
			t.Run("other-method", func(t *testing.T) {
				c := srv.newClient()
				defer c.close()
				for i := range 20 {
					k := fmt.Sprintf("method-%d", i)
					require.Equal(t, http.StatusOK, do(t, c, http.MethodGet, "form", k, 1))
					do(t, c, http.MethodPost, "form", k, 1)
				}
				require.LessOrEqual(t, srv.run("form"), int64(20+1), "POSTs (1/hour) passed as repeats of GETs")
			})
		}
		t.Run("higher-cost", func(t *testing.T) {
			c := srv.newClient()
			defer c.close()
			admitted := 0
			for i := range 10 {
				k := fmt.Sprintf("cost-%d", i)
				if do(t, c, http.MethodPost, "bulk", k, 1) == http.StatusOK {
					admitted++
				}
				if do(t, c, http.MethodPost, "bulk", k, 3) == http.StatusOK {
					admitted += 3
				}
			}
			require.LessOrEqual(t, admitted, 3, "units admitted on the 3/hour bulk route")
		})
		t.Run("concurrent-repeats", func(t *testing.T) {
			// 64 concurrent repeats of one admitted request: at most
			// MaxRepeats pass.
			c := srv.newClient()
			defer c.close()
			require.Equal(t, http.StatusOK, do(t, c, http.MethodPost, "hot", "hot-1", 1))
			r := request{method: http.MethodPost, path: a.path("hot"), header: map[string]string{"X-Idempotency-Key": "hot-1", "X-Cost": "1"}}
			sts := sendAll(t, srv, 64, repeat(r, 64))
			srv.stop()
			require.LessOrEqual(t, countStatus(sts, http.StatusOK), 3, "concurrent repeats that passed")
			require.LessOrEqual(t, srv.run("hot"), int64(1+3))
		})
	})
}

// TestDisconnectBeforeDecision: a client that disconnects (or cancels the
// call) while its request is being decided is either counted or never
// reaches the handler.
func TestDisconnectBeforeDecision(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		for _, c := range []struct {
			name string
			// keyDelay makes the key take a moment, so the client is gone
			// before the store is asked.
			keyDelay time.Duration
		}{{"at-once", 0}, {"while-deciding", 3 * time.Millisecond}} {
			t.Run(c.name, func(t *testing.T) {
				base := ip(t)
				key := func(r keyfunc.Request) (string, error) {
					if c.keyDelay > 0 {
						time.Sleep(c.keyDelay)
					}
					return base(r)
				}
				const limit = 5
				l := newLimiter(t, st.open(t), []core.Policy{{Name: "work", Key: key, Limit: core.PerHour(limit)}})
				srv := a.start(t, spec{limiter: l, routes: []string{"work"}})
				r := request{method: http.MethodPost, path: a.path("work")}
				const requests, workers = 120, 6
				var next atomic.Int64
				var wg sync.WaitGroup
				for range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= requests {
							srv.disconnect(r)
						}
					}()
				}
				wg.Wait()
				srv.stop() // every handler has returned
				require.LessOrEqual(t, srv.run("work"), int64(limit), "handler runs of %d disconnecting requests under %d/hour", requests, limit)
			})
		}
	})
}

// TestMissingKeyEscapes: a request without one policy's identity is still
// limited by the other policies (the docs' IP floor plus a per-API-key
// policy), and does not write a log line per request.
func TestMissingKeyEscapes(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		s := st.open(t)
		const floor = 5
		l := newLimiter(t, s, []core.Policy{
			{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerHour(100)},
			{Name: "ip-floor", Key: ip(t), Limit: core.PerHour(floor)},
		})
		var warns atomic.Int64
		srv := a.start(t, spec{limiter: l, routes: []string{"api"}, logger: slog.New(logCounter{&warns})})
		sts := sendAll(t, srv, 4, repeat(request{path: a.path("api")}, 60))
		require.LessOrEqual(t, countStatus(sts, http.StatusOK), floor, "requests without X-API-Key that passed the IP floor")
		sts = sendAll(t, srv, 4, repeat(request{path: a.path("api"), header: map[string]string{"X-API-Key": "k1"}}, 20))
		require.Zero(t, countStatus(sts, http.StatusOK), "the IP floor is exhausted")
		srv.stop()
		require.LessOrEqual(t, srv.run("api"), int64(floor))
		require.Less(t, warns.Load(), int64(10), "WARN lines for 80 requests")
	})
}

// TestUndecidedLogsAreRateLimited: requests the limiter cannot decide (here
// a key function that fails) must not write one WARN line each: a client
// could flood the logs on demand.
func TestUndecidedLogsAreRateLimited(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			s, err := memorystore.New()
			require.NoError(t, err)
			defer s.Close()
			failing := func(keyfunc.Request) (string, error) { return "", errors.New("identity backend down") }
			l := newLimiter(t, s, []core.Policy{{Name: "api", Key: failing, Limit: core.PerHour(1000)}})
			var warns atomic.Int64
			srv := a.start(t, spec{limiter: l, routes: []string{"api"}, logger: slog.New(logCounter{&warns})})
			sendAll(t, srv, 4, repeat(request{path: a.path("api")}, 200))
			srv.stop()
			require.LessOrEqual(t, warns.Load(), int64(20), "WARN lines for 200 undecided requests")
		})
	}
}

// pathVariants returns spellings of p that a router may send to p's handler:
// case, trailing slash, doubled or dot segments, percent-encoding, a query.
func pathVariants(p string) []string {
	i := strings.LastIndexByte(p, '/')
	dir, last := p[:i], p[i+1:]
	title := strings.ToUpper(last[:1]) + last[1:]
	vs := []string{
		p,
		strings.ToUpper(p),
		dir + "/" + title,
		p + "/",
		p + "//",
		"/" + p,
		dir + "//" + last,
		dir + "/./" + last,
		"/x/.." + p,
		p + "/.",
		dir + "/" + fmt.Sprintf("%%%02X", last[0]) + last[1:],
		dir + "/" + fmt.Sprintf("%%%02x", last[0]) + last[1:],
		p + "?x=1",
		p + "/?x=1",
		strings.ToUpper(p) + "/",
		p + "%20",
		p + ";x=1",
	}
	if dir != "" {
		vs = append(vs, dir+"%2F"+last, dir+"%2f"+last)
	}
	return vs
}

// TestPathVariants: whatever spelling a framework's router sends to a
// limited route's handler, the route's policy counts it.
func TestPathVariants(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		s := st.open(t)
		const limit = 3
		l := newLimiter(t, s, []core.Policy{{Name: "login", Key: ip(t), Limit: core.PerHour(limit), Match: routes(a, "login")}})
		srv := a.start(t, spec{limiter: l, routes: []string{"login", "other"}})
		var rs []request
		for _, v := range pathVariants(a.path("login")) {
			for _, m := range []string{http.MethodGet, http.MethodPost} {
				rs = append(rs, repeat(request{method: m, path: v}, 3)...)
			}
		}
		sendAll(t, srv, 2, rs)
		srv.stop()
		require.LessOrEqual(t, srv.run("login"), int64(limit), "login handler runs over %d path variants", len(rs))
	})
}

const childEnv = "SLUICE_ATTACK_CHILD"

// TestPanickingKeyFunction: a key function that panics never crashes the
// process; the request is refused or counted. A panic that escapes kills
// the whole test binary, so each adapter runs in a child process
// (TestPanickingKeyChild) and this test reports how it ended.
func TestPanickingKeyFunction(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPanickingKeyChild$/^"+a.name+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"=1")
			out, err := cmd.CombinedOutput()
			tail := string(out)
			if len(tail) > 6000 {
				tail = tail[len(tail)-6000:]
			}
			require.NoError(t, err, "the %s child process failed or crashed:\n%s", a.name, tail)
			require.Contains(t, string(out), "--- PASS: TestPanickingKeyChild/"+a.name, tail)
		})
	}
}

// TestPanickingKeyChild is the body of TestPanickingKeyFunction; it does
// nothing unless run as its child process.
func TestPanickingKeyChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	each(t, func(t *testing.T, a adapter, st storeKind) {
		s := st.open(t)
		base := ip(t)
		panicky := func(r keyfunc.Request) (string, error) {
			if r.Header("X-Panic") != "" {
				panic("key function bug")
			}
			return base(r)
		}
		const floor = 3
		l := newLimiter(t, s, []core.Policy{
			{Name: "panicky", Key: panicky, Limit: core.PerHour(1000)},
			{Name: "ip-floor", Key: base, Limit: core.PerHour(floor)},
		})
		srv := a.start(t, spec{limiter: l, routes: []string{"api"}, refuse: true})
		rs := append(repeat(request{path: a.path("api"), header: map[string]string{"X-Panic": "1"}}, 20),
			repeat(request{path: a.path("api")}, 5)...)
		sts := sendAll(t, srv, 2, rs)
		srv.stop()
		for i, st := range sts {
			require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable}, st,
				"request %d got no answer (0) or an unexpected status", i)
		}
		require.LessOrEqual(t, srv.run("api"), int64(floor))
	})
}

// TestRetainedRequestStrings: strings taken from a request and kept after it
// (the tier cache, store keys) must not change when the framework reuses its
// buffers for the next request (Fiber). Users of the same length alternate
// on two connections, so each connection's buffers are rewritten by another
// user while a cache entry made from them is still looked up by the other.
func TestRetainedRequestStrings(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		s := st.open(t)
		var mu sync.Mutex
		resolves := map[string]int{}
		user := keyfunc.Header("X-User")
		const free, gold = 2, 50
		l := newLimiter(t, s, []core.Policy{{
			Name: "per-user", Key: user, Limit: core.PerHour(free),
			Tiers: map[string]core.Limit{"gold": core.PerHour(gold)},
		}}, core.WithTiering(core.Tiering{
			Key: user,
			Resolve: func(_ context.Context, id string) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				resolves[strings.Clone(id)]++
				if strings.HasPrefix(id, "gold-") {
					return "gold", nil
				}
				return "", nil
			},
			TTL: time.Hour,
		}))
		srv := a.start(t, spec{limiter: l, routes: []string{"api"}})
		conns := []client{srv.newClient(), srv.newClient()}
		defer conns[0].close()
		defer conns[1].close()
		users := []string{"gold-0001", "free-0001", "gold-0002", "free-0002", "gold-0003", "free-0003"}
		passed := map[string]int{}
		const rounds = 8
		for round := range rounds {
			for j, u := range users {
				st, err := conns[(round+j)%2].do(context.Background(), request{path: a.path("api"), header: map[string]string{"X-User": u}})
				require.NoError(t, err)
				if st == http.StatusOK {
					passed[u]++
				}
			}
		}
		srv.stop()
		for _, u := range users {
			want := free
			if strings.HasPrefix(u, "gold-") {
				want = rounds
			}
			require.Equal(t, want, passed[u], "requests of %s that passed", u)
			require.Equal(t, 1, resolves[u], "tier lookups of %s (TTL 1h)", u)
		}
		require.Len(t, resolves, len(users), "tier lookups of identities nobody sent: %v", resolves)
	})
}

// spoofHeaders returns forwarding headers with random addresses.
func spoofHeaders(rng *rand.Rand) map[string]string {
	addr := func() string {
		return fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
	}
	return map[string]string{
		"X-Forwarded-For":  addr() + ", " + addr(),
		"Forwarded":        "for=" + addr() + ";proto=https",
		"X-Real-IP":        addr(),
		"True-Client-IP":   addr(),
		"CF-Connecting-IP": addr(),
		"X-Client-IP":      addr(),
		"Fly-Client-IP":    addr(),
	}
}

// TestSpoofedForwarding: forwarding headers from a client that is not a
// trusted proxy never move it to a fresh bucket (a guard for what holds).
func TestSpoofedForwarding(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		keys := map[string]keyfunc.Func{"peer": ip(t)}
		trusted := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8", "192.168.0.0/16"))
		keys["trusted-10/8"] = trusted
		fwd := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.FromForwarded())
		keys["forwarded-10/8"] = fwd
		if a.name == "fiber" {
			keys["fiberlimit.FrameworkIP"] = fiberlimit.FrameworkIP() // safe with Fiber's defaults (no ProxyHeader)
		}
		rng := rand.New(rand.NewPCG(7, uint64(len(a.name))))
		for name, key := range keys {
			t.Run(name, func(t *testing.T) {
				const limit = 3
				l := newLimiter(t, st.open(t), []core.Policy{{Name: "api", Key: key, Limit: core.PerHour(limit)}})
				srv := a.start(t, spec{limiter: l, routes: []string{"api"}})
				var rs []request
				for range 30 {
					rs = append(rs, request{path: a.path("api"), header: spoofHeaders(rng)})
				}
				sendAll(t, srv, 3, rs)
				srv.stop()
				require.LessOrEqual(t, srv.run("api"), int64(limit))
			})
		}
	})
}

// TestKeyFloodEviction: a flood of new identities (on the same policy and on
// another policy sharing the store) must not evict a throttled identity,
// which would then start fresh. Memory store only: Redis keys live until
// their TTL. The flood is eight times the store's bound, so every key but
// the ones eviction keeps is evicted several times over; a larger bound
// only makes the same flood longer.
func TestKeyFloodEviction(t *testing.T) {
	algorithms := []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.TokenBucket, core.LeakyBucket, core.GCRA}
	const maxKeys, flood, limit = 256, 8 * 256, 3
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			for _, alg := range algorithms {
				t.Run(alg.String(), func(t *testing.T) {
					s, err := memorystore.New(memorystore.WithMaxKeys(maxKeys))
					require.NoError(t, err)
					defer s.Close()
					client := keyfunc.Header("X-Client")
					l := newLimiter(t, s, []core.Policy{
						{Name: "api", Key: client, Limit: core.Per(limit, time.Hour).WithAlgorithm(alg), Match: routes(a, "api")},
						{Name: "other", Key: client, Limit: core.Per(limit, time.Hour).WithAlgorithm(alg), Match: routes(a, "other")},
					})
					srv := a.start(t, spec{limiter: l, routes: []string{"api", "other"}})
					victim := request{path: a.path("api"), header: map[string]string{"X-Client": "victim"}}
					sts := sendAll(t, srv, 1, repeat(victim, 2*limit))
					require.Equal(t, limit, countStatus(sts, http.StatusOK))
					// The flood: one request per new identity, half on each policy.
					ctx := context.Background()
					for i := range flood {
						path := a.path("api")
						if i%2 == 1 {
							path = a.path("other")
						}
						_, err := l.Check(ctx, keyfunc.Static{MethodName: http.MethodGet, PathName: path,
							Headers: map[string][]string{"X-Client": {"flood-" + strconv.Itoa(i)}}})
						require.NoError(t, err)
					}
					sts = sendAll(t, srv, 1, repeat(victim, 2*limit))
					srv.stop()
					require.Zero(t, countStatus(sts, http.StatusOK), "the throttled identity passed again after %d new identities", flood)
					require.LessOrEqual(t, srv.run("api"), int64(limit))
				})
			}
		})
	}
}

// TestRandomHostileTraces mixes the classes above at random, from many
// goroutines: path variants, idempotency keys reused across routes, methods
// and costs, spoofed forwarding headers, a missing API key, and clients
// that disconnect. Whatever the mix, the throttled route's handler runs at
// most capacity × (1 + MaxRepeats) times: every counted original takes at
// least one of its units, and only exact repeats of an admitted original
// are free, at most MaxRepeats each.
func TestRandomHostileTraces(t *testing.T) {
	each(t, func(t *testing.T, a adapter, st storeKind) {
		const capacity, maxRepeats = 3, 3
		key := ip(t)
		l := newLimiter(t, st.open(t), []core.Policy{
			{Name: "per-key", Key: keyfunc.Header("X-API-Key"), Limit: core.PerHour(100_000)},
			{Name: "global", Key: key, Limit: core.PerHour(100_000)},
			{Name: "login", Key: key, Limit: core.PerHour(capacity), Match: routes(a, "login")},
		}, core.WithIdempotency(core.Idempotency{MaxRepeats: maxRepeats}))
		srv := a.start(t, spec{limiter: l, routes: []string{"login", "cheap"}, cost: true})
		variants := pathVariants(a.path("login"))
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		const requests, workers = 240, 8
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				c := srv.newClient()
				defer c.close()
				for next.Add(1) <= requests {
					r := request{method: []string{http.MethodGet, http.MethodPost}[rng.IntN(2)], header: map[string]string{}}
					if rng.IntN(3) == 0 {
						r.path = a.path("cheap")
					} else {
						r.path = variants[rng.IntN(len(variants))]
					}
					if rng.IntN(2) == 0 {
						r.header = spoofHeaders(rng)
					}
					if rng.IntN(2) == 0 {
						r.header["X-API-Key"] = fmt.Sprintf("key-%d", rng.IntN(1000))
					}
					if rng.IntN(2) == 0 {
						r.header["X-Idempotency-Key"] = fmt.Sprintf("idem-%d", rng.IntN(4))
					}
					r.header["X-Cost"] = strconv.Itoa(1 + rng.IntN(3))
					if rng.IntN(4) == 0 {
						srv.disconnect(r)
						continue
					}
					if _, err := c.do(context.Background(), r); err != nil {
						c.close() // a new connection next time
					}
				}
			}()
		}
		wg.Wait()
		srv.stop()
		require.LessOrEqual(t, srv.run("login"), int64(capacity*(1+maxRepeats)), "login handler runs (seed %d)", seed)
	})
}
