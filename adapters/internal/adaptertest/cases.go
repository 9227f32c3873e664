package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// FlakyStore is a Store whose backend can be taken down: while Down is
// set, every Take fails with ErrDown.
type FlakyStore struct {
	core.Store
	Down atomic.Bool
}

// Take fails with ErrDown while s.Down is set, and is the Store's Take
// otherwise.
func (s *FlakyStore) Take(ctx context.Context, ops []core.Op, res []core.Result) error {
	if s.Down.Load() {
		return ErrDown
	}
	return s.Store.Take(ctx, ops, res)
}

// RouteKeys is implemented by every HTTP harness: what keyfunc.Route gives
// the global middleware for a request to path whose route is template (""
// if no route matched). Gin and Echo route before their middleware runs
// (the template, or the path if none matched); a ServeMux behind net/http
// middleware routes after it (the path); Fiber gives app.Use middleware
// the Use prefix ("/").
type RouteKeys interface {
	GlobalRoute(template, path string) string
}

// requireNoHeaders checks that res carries none of the rate-limit headers.
func requireNoHeaders(t *testing.T, res Response) {
	t.Helper()
	for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit",
		"X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State", "Retry-After"} {
		require.Empty(t, res.Header.Values(name), name)
	}
}

// member is the member of the RateLimit-Policy (or RateLimit) field v
// named name, failing t if there is none.
func member(t *testing.T, v, name string) sftest.Member {
	t.Helper()
	for _, m := range sftest.List(t, v) {
		if m.Name == name {
			return m
		}
	}
	require.Failf(t, "no such member", "%q has no member %q", v, name)
	return sftest.Member{}
}

// concurrent: many goroutines, one client: exactly the capacity is
// admitted, and the handler runs exactly that often.
func concurrent(t *testing.T, h Harness) {
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), keyfunc.Const("one"), core.PerMinute(50))})
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				switch s.Do(t, Request{}).Status {
				case http.StatusOK:
					allowed.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 50, allowed.Load())
	require.EqualValues(t, 150, denied.Load())
	require.EqualValues(t, 50, s.Runs())
}

// storeRecovers: while the store is down, requests go through undecided
// (no Decision, no headers) with one log line for the burst; once it is
// back, limiting resumes with nothing to do.
func storeRecovers(t *testing.T, h Harness) {
	st := &FlakyStore{Store: memStore(t)}
	var logs SyncBuffer
	s := h.Start(t, Setup{Limiter: limiter(t, st, nil, core.PerMinute(1)), Logger: slogTo(&logs)})
	st.Down.Store(true)
	start := time.Now()
	for range 3 {
		res := s.Do(t, Request{})
		require.Equal(t, http.StatusOK, res.Status)
		require.Equal(t, "none", res.Header.Get(HeaderDecision), "no Decision when undecided")
		requireNoHeaders(t, res)
	}
	if time.Since(start) < time.Second {
		require.Equal(t, 1, strings.Count(logs.String(), "sluice: request not rate limited"), "at most a line a second")
	}
	require.Contains(t, logs.String(), ErrDown.Error())

	st.Down.Store(false)
	require.Equal(t, http.StatusOK, s.Do(t, Request{}).Status)
	require.Equal(t, http.StatusTooManyRequests, s.Do(t, Request{}).Status)
	require.EqualValues(t, 4, s.Runs())
}

// refillAndOtherClients: with 10 a minute (a token every 6 s), the 11th
// request of a client is denied with a wait of exactly 6 s, another client
// has its own bucket, and 6 s later the first gets one more request.
func refillAndOtherClients(t *testing.T, h Harness) {
	clock := limitertest.NewClock()
	s := h.Start(t, Setup{Limiter: limiter(t, clockStore(t, clock), nil, core.PerMinute(10))})
	for range 10 {
		require.Equal(t, http.StatusOK, s.Do(t, Request{Remote: "203.0.113.7"}).Status)
	}
	res := s.Do(t, Request{Remote: "203.0.113.7"})
	p := checkProblem(t, res, "per-ip")
	require.Equal(t, "Rate limit exceeded; retry in 6 seconds.", p.Detail)
	require.Equal(t, "Too Many Requests", p.Title)
	require.Equal(t, "6", res.Header.Get("Retry-After"))

	res = s.Do(t, Request{Remote: "198.51.100.1"})
	require.Equal(t, http.StatusOK, res.Status, "another client has its own bucket")
	require.Equal(t, "9", res.Header.Get("X-RateLimit-Remaining"))

	clock.Advance(5 * time.Second)
	require.Equal(t, http.StatusTooManyRequests, s.Do(t, Request{Remote: "203.0.113.7"}).Status, "not before the wait")
	clock.Advance(time.Second)
	res = s.Do(t, Request{Remote: "203.0.113.7"})
	require.Equal(t, http.StatusOK, res.Status, "Retry-After was exact")
	require.Equal(t, "per-ip warning 0", res.Header.Get(HeaderDecision))
	require.EqualValues(t, 12, s.Runs())
}

// decisionInHandler: the handler reads its request's Decision (the same
// one wherever the adapter stores it), with the binding policy, the
// warning state and the quota left.
func decisionInHandler(t *testing.T, h Harness) {
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(10))})
	var got []string
	for range 9 {
		got = append(got, s.Do(t, Request{}).Header.Get(HeaderDecision))
	}
	require.Equal(t, "per-ip normal 9", got[0])
	require.Equal(t, "per-ip normal 2", got[7])
	require.Equal(t, "per-ip warning 1", got[8])
}

// deniedHandler: a custom denied handler answers a denial in place of the
// problem document; the headers are set before it runs, it finds the
// denied Decision, its body is not labelled a problem, and the route's
// handler does not run.
func deniedHandler(t *testing.T, h Harness) {
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(1)), Denied: true})
	require.Equal(t, http.StatusOK, s.Do(t, Request{}).Status)
	res := s.Do(t, Request{})
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	require.Equal(t, "denied per-ip throttled 0 retry=60", res.Body)
	require.Equal(t, "60", res.Header.Get("Retry-After"))
	require.Equal(t, `"per-ip";r=0;t=60`, res.Header.Get("RateLimit"))
	require.NotEqual(t, ratelimitfields.ProblemContentType, res.Header.Get("Content-Type"))
	require.EqualValues(t, 1, s.Runs())
}

// headerConfig: the header configuration leaves out whole families and
// writes X-RateLimit-Reset as seconds from now.
func headerConfig(t *testing.T, h Harness) {
	l := limiter(t, memStore(t), nil, core.PerMinute(2))
	s := h.Start(t, Setup{Limiter: l, Headers: &ratelimitfields.Config{Omit: ratelimitfields.Draft | ratelimitfields.State, Reset: ratelimitfields.ResetDelta}})
	res := s.Do(t, Request{})
	require.Equal(t, http.StatusOK, res.Status)
	for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-State"} {
		require.Empty(t, res.Header.Values(name), name)
	}
	require.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"))
	require.Equal(t, "1", res.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "30", res.Header.Get("X-RateLimit-Reset"), "one token back in 30 s: the quota is whole again")
	require.Equal(t, http.StatusOK, s.Do(t, Request{}).Status)

	s = h.Start(t, Setup{Limiter: l, Headers: &ratelimitfields.Config{Omit: ratelimitfields.RetryAfter | ratelimitfields.XRateLimit}})
	res = s.Do(t, Request{})
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	for _, name := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		require.Empty(t, res.Header.Values(name), name)
	}
	require.Equal(t, `"per-ip";r=0;t=30`, res.Header.Get("RateLimit"))
}

// perRoute: a limiter on one route only, behind a global one, counts that
// route alone, and its Decision merges with the global one's; another route's limiter with its own key (an API key and
// the route template) counts per key across the route's paths, and lets
// a request without the key through.
func perRoute(t *testing.T, h Harness) {
	st := memStore(t)
	ip := limiter(t, st, nil, core.PerMinute(100))
	login, err := core.NewLimiter(st, []core.Policy{{Name: "login", Key: keyfunc.IP(), Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	api, err := core.NewLimiter(st, []core.Policy{{Name: "api", Key: keyfunc.IP(), Limit: core.PerMinute(3)}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: ip, Logger: slogTo(nil), Routes: map[string]Route{
		"login": {Limiter: login},
		"files": {Limiter: api, Key: keyfunc.Join(keyfunc.Header("X-API-Key"), keyfunc.Route())},
	}})

	for range 2 {
		require.Equal(t, http.StatusOK, s.Do(t, Request{Path: "/login"}).Status)
	}
	res := s.Do(t, Request{Path: "/login"})
	checkProblem(t, res, "login")
	// Stacked, the route's limiter merges with the global one: both
	// policies are listed, the denying one binds.
	require.Equal(t, `"per-ip";q=100;w=60, "login";q=2;w=60`, res.Header.Get("RateLimit-Policy"))
	require.Equal(t, "login", sftest.List(t, res.Header.Get("RateLimit"))[0].Name, "the denying policy binds")
	require.Equal(t, http.StatusOK, s.Do(t, Request{}).Status, "other routes are unaffected")
	require.Equal(t, http.StatusOK, s.Do(t, Request{Path: "/login", Remote: "198.51.100.1"}).Status, "other clients are unaffected")

	// The API key and the route template are the identity: one key from
	// three addresses on three paths shares one bucket; another key has
	// its own.
	key := func(k, path, remote string) Response {
		return s.Do(t, Request{Path: path, Remote: remote, Header: http.Header{"X-Api-Key": {k}}})
	}
	res = key("k1", "/files/a", "203.0.113.7")
	require.Equal(t, "2", res.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "api normal 2", res.Header.Get(HeaderDecision), "the handler sees the merge, bound by the route's policy")
	require.Len(t, sftest.List(t, res.Header.Get("RateLimit-Policy")), 2)
	require.Equal(t, "1", key("k1", "/files/b", "198.51.100.1").Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "0", key("k1", "/files/c", "192.0.2.1").Header.Get("X-RateLimit-Remaining"))
	checkProblem(t, key("k1", "/files/a", "192.0.2.2"), "api")
	require.Equal(t, "2", key("k2", "/files/a", "203.0.113.7").Header.Get("X-RateLimit-Remaining"))

	// No API key: no identity, so the route's limiter lets it through.
	res = s.Do(t, Request{Path: "/files/a", Remote: "203.0.113.7"})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "files", res.Ran)
	require.EqualValues(t, 9, s.Runs())
}

// routeTemplate: keyed by keyfunc.Route, the global middleware counts
// the requests that share a route key (RouteKeys) in one bucket: a path no
// route matched is answered 404 with the headers.
func routeTemplate(t *testing.T, h Harness) {
	rk, ok := h.(RouteKeys)
	require.True(t, ok, "an HTTP harness implements RouteKeys")
	l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "per-route", Key: keyfunc.Route(), Limit: core.PerMinute(2)}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	counts := map[string]int{}
	for i, st := range []struct{ template, path string }{
		{"", "/nowhere"}, {"", "/nowhere"}, {"/files/{name}", "/files/1"}, {"/files/{name}", "/files/2"},
		{"/files/{name}", "/files/3"}, {"", "/elsewhere"},
	} {
		key := rk.GlobalRoute(st.template, st.path)
		counts[key]++
		res := s.Do(t, Request{Path: st.path, Remote: fmt.Sprintf("198.51.100.%d", i)})
		want := http.StatusOK
		if st.template == "" {
			want = http.StatusNotFound
		}
		if counts[key] > 2 {
			want = http.StatusTooManyRequests
		}
		require.Equal(t, want, res.Status, "%s (route key %q)", st.path, key)
		require.Equal(t, fmt.Sprint(max(2-counts[key], 0)), res.Header.Get("X-RateLimit-Remaining"), "%s (route key %q)", st.path, key)
	}
}

// clientAddress: keyed by keyfunc.IP, the client is the peer unless a
// trusted proxy says otherwise: headers a client writes are ignored, and
// behind trusted proxies the rightmost untrusted address across every
// X-Forwarded-For line is the client.
func clientAddress(t *testing.T, h Harness) {
	t.Run("no trusted proxy", func(t *testing.T) {
		s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(2))})
		var codes []int
		for i := range 4 {
			codes = append(codes, s.Do(t, Request{Remote: "203.0.113.66", Header: http.Header{
				"X-Forwarded-For": {fmt.Sprintf("10.0.0.%d", i)}, "Forwarded": {fmt.Sprintf("for=10.1.0.%d", i)},
				"X-Real-Ip": {"10.2.0.1"},
			}}).Status)
		}
		require.Equal(t, []int{200, 200, 429, 429}, codes, "spoofed headers leave the client in its own bucket")
		require.Equal(t, http.StatusOK, s.Do(t, Request{Remote: "203.0.113.67"}).Status, "a neighbour is not affected")
		garbage := strings.Repeat("1.2.3.4, ", 300) // within fasthttp's default 4 KiB header buffer
		res := s.Do(t, Request{Remote: "203.0.113.66", Header: http.Header{"X-Forwarded-For": {garbage}, "Forwarded": {`for="[::1`}}})
		require.Equal(t, http.StatusTooManyRequests, res.Status, "garbage headers: still a decision")
	})
	t.Run("trusted proxies", func(t *testing.T) {
		ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))
		s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), ip, core.PerMinute(1))})
		xff := func(lines ...string) Request {
			return Request{Remote: "10.0.0.3", Header: http.Header{"X-Forwarded-For": lines}}
		}
		// The client-written leftmost entry never matters: the client is
		// 203.0.113.9, across both lines.
		require.Equal(t, http.StatusOK, s.Do(t, xff("1.1.1.1, 203.0.113.9", "10.0.0.4")).Status)
		require.Equal(t, http.StatusTooManyRequests, s.Do(t, xff("2.2.2.2, 203.0.113.9", "10.0.0.4")).Status)
		require.Equal(t, http.StatusOK, s.Do(t, xff("203.0.113.10", "10.0.0.4")).Status)
	})
}

// policies: the policy layer through the adapter, on memory and on Redis:
// several policies all or nothing, route matching, shadow, tiers, an
// override, refunds after the response by its status, and idempotent
// retries.
func policies(t *testing.T, h Harness) {
	// Redis expiries are absolute: the test clock runs an hour ahead.
	now := time.Now().Add(time.Hour).Truncate(time.Hour)
	clock := func() time.Time { return now }
	t.Run("memory", func(t *testing.T) {
		st, err := memorystore.New(memorystore.WithClock(clock))
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		testPolicies(t, h, st, now)
	})
	t.Run("redis", func(t *testing.T) {
		st, err := redisstore.New(redistest.StartServer(t).Client(t), redisstore.WithClock(clock), redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		testPolicies(t, h, st, now)
	})
}

func testPolicies(t *testing.T, h Harness, st core.Store, now time.Time) {
	user := keyfunc.Header("X-User")
	l, err := core.NewLimiter(st, []core.Policy{
		{Name: "ip", Key: keyfunc.IP(), Limit: core.PerMinute(6)},
		{Name: "user", Key: user, Limit: core.PerMinute(3), Refund: core.RefundFailed, Match: core.Match{Routes: []string{"/files/*"}},
			Tiers: map[string]core.Limit{"gold": core.PerMinute(100)}},
		{Name: "trial", Key: user, Limit: core.PerMinute(1), Shadow: true},
	}, core.WithTiering(core.Tiering{Key: user, Resolve: func(_ context.Context, id string) (string, error) {
		if id == "goldie" {
			return "gold", nil
		}
		return "", nil
	}}), core.WithIdempotency(core.Idempotency{}))
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	send := func(path, remote, u string, status int, hdr ...string) Response {
		r := Request{Path: path, Remote: remote, Header: http.Header{"X-User": {u}, HeaderStatus: {fmt.Sprint(status)}}}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return s.Do(t, r)
	}
	// Failed responses are not counted by "user" (refund), but "ip" counts
	// them.
	for range 2 {
		require.Equal(t, http.StatusBadGateway, send("/files/x", "192.0.2.1", "ann", http.StatusBadGateway).Status)
	}
	var codes []int
	for range 4 {
		codes = append(codes, send("/files/x", "192.0.2.1", "ann", http.StatusOK).Status)
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes, "three for ann; the shadow trial never denies")
	checkProblem(t, send("/files/x", "192.0.2.1", "ann", http.StatusOK), "user")
	// The denied requests consumed nothing from "ip": 2 + 3 admitted of 6.
	res := send("/", "192.0.2.1", "ann", http.StatusOK) // only "ip" and "trial" match here
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"))
	require.NotContains(t, res.Header.Get("RateLimit-Policy"), `"user"`)
	// A gold user gets the tier's limit.
	res = send("/files/x", "192.0.2.2", "goldie", http.StatusOK)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, int64(100), member(t, res.Header.Get("RateLimit-Policy"), "user").Params["q"])
	// An override raises ann's user limit at once.
	require.NoError(t, l.SetOverride(t.Context(), "user", "ann", core.PerMinute(50), now.Add(time.Hour)))
	require.Equal(t, http.StatusOK, send("/files/x", "192.0.2.3", "ann", http.StatusOK).Status)
	// An idempotent retry is free.
	first := send("/files/x", "192.0.2.4", "bea", http.StatusOK, "X-Idempotency-Key", "p-1").Header.Get("X-RateLimit-Remaining")
	again := send("/files/x", "192.0.2.4", "bea", http.StatusOK, "X-Idempotency-Key", "p-1").Header.Get("X-RateLimit-Remaining")
	require.Equal(t, "2", first)
	require.Equal(t, first, again)
}

// hooks: through the adapter, the Limiter's OnWarning fires once, as a
// client enters the warning state, and OnStateChange at each change of
// state.
func hooks(t *testing.T, h Harness) {
	var mu sync.Mutex
	var warned, changes []string
	l, err := core.NewLimiter(memStore(t), []core.Policy{{Name: "per-ip", Key: keyfunc.IP(), Limit: core.PerMinute(10)}},
		core.OnWarning(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
			mu.Lock()
			defer mu.Unlock()
			warned = append(warned, p.Policy)
		}),
		core.OnStateChange(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, p.Previous.String()+">"+p.State.String())
		}))
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	for range 12 {
		s.Do(t, Request{})
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"per-ip"}, warned, "OnWarning fires once, entering the warning state")
	require.Equal(t, []string{"normal>warning", "warning>throttled"}, changes)
}

// bindingMoves: the binding policy (the one RateLimit names) is whichever
// leaves the least, as time refills one and not the other; the denial
// names the policy that denied and its exact wait, to the end of an
// aligned fixed window.
func bindingMoves(t *testing.T, h Harness) {
	clock := limitertest.NewClock() // on the hour
	l, err := core.NewLimiter(clockStore(t, clock), []core.Policy{
		{Name: "burst", Key: keyfunc.IP(), Limit: core.PerSecond(5)},
		{Name: "hourly", Key: keyfunc.IP(), Limit: core.PerHour(8).WithAlgorithm(core.FixedWindow)},
	})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: l})
	var res Response
	for range 4 {
		res = s.Do(t, Request{})
	}
	require.Equal(t, []sftest.Member{{Name: "burst", Params: map[string]int64{"q": 5, "w": 1}}, {Name: "hourly", Params: map[string]int64{"q": 8, "w": 3600}}},
		sftest.List(t, res.Header.Get("RateLimit-Policy")))
	require.Equal(t, "burst", sftest.List(t, res.Header.Get("RateLimit"))[0].Name, "1/5 left is tighter than 4/8")
	clock.Advance(2 * time.Second)
	for range 4 {
		res = s.Do(t, Request{})
	}
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "hourly", sftest.List(t, res.Header.Get("RateLimit"))[0].Name, "0/8 left now binds")
	res = s.Do(t, Request{})
	checkProblem(t, res, "hourly")
	require.Equal(t, "3598", res.Header.Get("Retry-After"), "the aligned hour ends 3598 s after hh:00:02")
	require.EqualValues(t, 8, s.Runs())
}

// viewSeen is what a key function read of its keyfunc.Request.
type viewSeen struct {
	route, path, method, header, upper, query, missing, remote string
	lines                                                      []string
	absent                                                     bool
	ctx                                                        any
}

// requestView: a key function reads the request as it was sent through
// the adapter's keyfunc.Request: the route (RouteKeys), the path, the
// method, headers in any case and every line of a repeated one, the first
// value of a query parameter, the peer's address and the request's
// context.
func requestView(t *testing.T, h Harness) {
	rk, ok := h.(RouteKeys)
	require.True(t, ok, "an HTTP harness implements RouteKeys")
	var mu sync.Mutex
	var got viewSeen
	key := func(r keyfunc.Request) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		// Cloned: a view's strings may alias the request's buffers.
		got = viewSeen{
			route: strings.Clone(r.Route()), path: strings.Clone(r.Path()), method: strings.Clone(r.Method()),
			header: strings.Clone(r.Header("x-api-key")), upper: strings.Clone(r.Header("X-API-KEY")),
			query: strings.Clone(r.Query("a")), missing: r.Query("missing"), remote: r.RemoteAddr(),
			absent: r.HeaderValues("X-Absent") == nil, ctx: r.Context().Value(ContextKey{}),
		}
		for _, v := range r.HeaderValues("x-forwarded-for") {
			got.lines = append(got.lines, strings.Clone(v))
		}
		return "k", nil
	}
	s := h.Start(t, Setup{Limiter: limiter(t, memStore(t), nil, core.PerMinute(10)), Key: key})
	res := s.Do(t, Request{Path: "/files/42?a=b&a=c", Remote: "203.0.113.7", Header: http.Header{
		"X-Api-Key": {"k1"}, "X-Forwarded-For": {"10.0.0.1", "10.0.0.2, 10.0.0.3"},
	}})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "files", res.Ran)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, viewSeen{
		route: rk.GlobalRoute("/files/{name}", "/files/42"), path: "/files/42", method: http.MethodGet,
		header: "k1", upper: "k1", query: "b", remote: "203.0.113.7:1",
		lines: []string{"10.0.0.1", "10.0.0.2, 10.0.0.3"}, absent: true, ctx: ContextValue,
	}, got)
}
