package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

func do(h http.Handler, method, path, remote string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestRouteAndMethodMatching(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	l := f.limiter(t, nil,
		core.Policy{Name: "api", Key: ip, Limit: core.PerMinute(100), Match: core.Match{Routes: []string{"/api/**"}}},
		core.Policy{Name: "writes", Key: ip, Limit: core.PerMinute(2), Match: core.Match{Methods: []string{"POST", "put"}, Routes: []string{"/api/**"}}},
		core.Policy{Name: "user", Key: ip, Limit: core.PerMinute(50), Match: core.Match{Routes: []string{"/api/users/:id", "/api/users/{id}/avatar"}}},
	)
	h := httplimit.New(l)(ok)
	policies := func(method, path string) string {
		return do(h, method, path, "192.0.2.1:1").Result().Header.Get("RateLimit-Policy")
	}
	require.Equal(t, "", policies("GET", "/public"), "no policy: no headers")
	require.Equal(t, `"api";q=100;w=60`, policies("GET", "/api"))
	require.Equal(t, `"api";q=100;w=60, "user";q=50;w=60`, policies("GET", "/api/users/7"))
	require.Equal(t, `"api";q=100;w=60, "user";q=50;w=60`, policies("GET", "/api/users/7/avatar"))
	require.Equal(t, `"api";q=100;w=60`, policies("GET", "/api/users/7/friends"))
	require.Equal(t, `"api";q=100;w=60, "writes";q=2;w=60, "user";q=50;w=60`, policies("PUT", "/api/users/7"))
	// The writes policy denies the third write; reads go on.
	require.Equal(t, http.StatusOK, do(h, "POST", "/api/things", "192.0.2.1:1").Code)
	require.Equal(t, http.StatusTooManyRequests, do(h, "POST", "/api/things", "192.0.2.1:1").Code)
	require.Equal(t, http.StatusOK, do(h, "GET", "/api/things", "192.0.2.1:1").Code)
	for _, bad := range []string{"api", "/api//x", "/a/**/b", "/a/b*"} {
		_, err := core.NewLimiter(f.store, []core.Policy{{Name: "p", Key: ip, Limit: core.PerMinute(1), Match: core.Match{Routes: []string{bad}}}})
		require.ErrorContains(t, err, `policy "p": Match.Routes[0]:`, bad)
	}
}

func TestMatchingDoesNotGrowWithRules(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	var ps []core.Policy
	for i := range 500 {
		ps = append(ps, core.Policy{Name: fmt.Sprintf("r%d", i), Key: ip, Limit: core.PerMinute(10), Match: core.Match{Routes: []string{fmt.Sprintf("/svc%d/**", i)}}})
	}
	l := f.limiter(t, nil, ps...)
	h := httplimit.New(l)(ok)
	require.Equal(t, `"r321";q=10;w=60`, do(h, "GET", "/svc321/x/y", "192.0.2.1:1").Result().Header.Get("RateLimit-Policy"))
}

func TestShadowPolicies(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	var shadowDenied []string
	l := f.limiter(t, []core.LimiterOption{core.OnShadowDeny(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
		shadowDenied = append(shadowDenied, p.Policy)
	})},
		core.Policy{Name: "live", Key: ip, Limit: core.PerMinute(10)},
		core.Policy{Name: "trial", Key: ip, Limit: core.PerMinute(2), Shadow: true},
	)
	var last *core.Decision
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { last, _ = httplimit.DecisionFrom(r.Context()) }))
	for i := range 4 {
		w := do(h, "GET", "/", "192.0.2.1:1")
		require.Equal(t, http.StatusOK, w.Code, "request %d: a shadow policy never denies", i)
		require.Equal(t, `"live";q=10;w=60`, w.Result().Header.Get("RateLimit-Policy"), "clients do not see trials")
	}
	require.True(t, last.Results[1].ShadowDenied())
	require.Equal(t, []string{"trial", "trial"}, shadowDenied)
	require.Equal(t, int64(6), last.Results[0].Remaining, "the live policy counted every request")
	// A global shadow mode trials every policy.
	all := f.limiter(t, []core.LimiterOption{core.WithShadow()}, core.Policy{Name: "p", Key: ip, Limit: core.PerMinute(1)})
	h = httplimit.New(all)(ok)
	for range 3 {
		require.Equal(t, http.StatusOK, do(h, "GET", "/", "192.0.2.2:1").Code)
	}
}

func TestTiers(t *testing.T) {
	f := newFixture(t)
	lookups := 0
	tiering := core.Tiering{
		Key: keyfunc.Header("X-API-Key"),
		Resolve: func(_ context.Context, id string) (string, error) {
			lookups++
			switch id {
			case "gold":
				return "premium", nil
			case "broken":
				return "", errors.New("tier service down")
			}
			return "free", nil
		},
		TTL: time.Minute,
	}
	l := f.limiter(t, []core.LimiterOption{core.WithTiering(tiering)}, core.Policy{
		Name: "api", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(5),
		Tiers: map[string]core.Limit{"free": core.PerMinute(2), "premium": core.PerMinute(100)},
	})
	h := httplimit.New(l)(ok)
	limit := func(key string) string {
		return do(h, "GET", "/", "192.0.2.1:1", "X-API-Key", key).Result().Header.Get("X-RateLimit-Limit")
	}
	require.Equal(t, "2", limit("bronze"))
	require.Equal(t, "100", limit("gold"))
	require.Equal(t, "5", limit("broken"), "a failed lookup gets the default limit")
	lookups = 0
	for range 5 {
		limit("gold")
	}
	require.Zero(t, lookups, "tiers are cached")
	_, err := core.NewLimiter(f.store, []core.Policy{{Name: "p", Key: keyfunc.Const("x"), Limit: core.PerMinute(1), Tiers: map[string]core.Limit{"gold": {}}}}, core.WithTiering(tiering))
	require.ErrorContains(t, err, `policy "p": Tiers["gold"].`)
	_, err = core.NewLimiter(f.store, []core.Policy{{Name: "p", Key: keyfunc.Const("x"), Limit: core.PerMinute(1), Tiers: map[string]core.Limit{"gold": core.PerMinute(2)}}})
	require.ErrorContains(t, err, "no WithTiering")
}

func TestRefundAfterTheResponse(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	l := f.limiter(t, nil, core.Policy{Name: "p", Key: ip, Limit: core.PerMinute(3), Refund: core.RefundFailed})
	status := http.StatusInternalServerError
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	for range 10 {
		require.Equal(t, http.StatusInternalServerError, do(h, "GET", "/", "192.0.2.1:1").Code, "failed responses are not counted")
	}
	status = http.StatusOK
	codes := []int{}
	for range 4 {
		codes = append(codes, do(h, "GET", "/", "192.0.2.1:1").Code)
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes)
	// Peek and Reset for admin code.
	d, err := l.Peek(context.Background(), httplimit.Request(httptest.NewRequest("GET", "/", nil)))
	require.NoError(t, err)
	require.Len(t, d.Results, 1)
	require.NoError(t, l.Reset(context.Background(), "p", "192.0.2.1"))
	require.Equal(t, http.StatusOK, do(h, "GET", "/", "192.0.2.1:1").Code)
	require.Error(t, l.Reset(context.Background(), "nope", "x"))
}

func TestOverridesAndBlocks(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	l := f.limiter(t, nil, core.Policy{Name: "p", Key: ip, Limit: core.PerMinute(1)})
	h := httplimit.New(l)(ok)
	ctx := context.Background()
	require.Equal(t, http.StatusOK, do(h, "GET", "/", "192.0.2.1:1").Code)
	require.Equal(t, http.StatusTooManyRequests, do(h, "GET", "/", "192.0.2.1:1").Code)
	require.NoError(t, l.SetOverride(ctx, "p", "192.0.2.1", core.PerMinute(50), f.now.Add(time.Hour)))
	w := do(h, "GET", "/", "192.0.2.1:1")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "50", w.Result().Header.Get("X-RateLimit-Limit"))
	require.NoError(t, l.Block(ctx, "p", "192.0.2.2", f.now.Add(90*time.Second)))
	w = do(h, "GET", "/", "192.0.2.2:1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "90", w.Result().Header.Get("Retry-After"))
	require.NoError(t, l.ClearOverride(ctx, "p", "192.0.2.2"))
	require.Equal(t, http.StatusOK, do(h, "GET", "/", "192.0.2.2:1").Code)
	require.Error(t, l.SetOverride(ctx, "nope", "x", core.PerMinute(1), f.now.Add(time.Hour)))
	require.Error(t, l.SetOverride(ctx, "p", "x", core.Limit{}, f.now.Add(time.Hour)))
	require.Error(t, l.SetOverride(ctx, "p", "x", core.PerMinute(1), f.now.Add(-time.Hour)))
}

func TestIdempotentRetries(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	l := f.limiter(t, []core.LimiterOption{core.WithIdempotency(core.Idempotency{MaxRepeats: 2})},
		core.Policy{Name: "p", Key: ip, Limit: core.PerMinute(3)})
	h := httplimit.New(l)(ok)
	remaining := func(hdr ...string) string {
		return do(h, "POST", "/pay", "192.0.2.1:1", hdr...).Result().Header.Get("X-RateLimit-Remaining")
	}
	require.Equal(t, "2", remaining("X-Idempotency-Key", "order-1"))
	require.Equal(t, "2", remaining("X-Idempotency-Key", "order-1"), "a retry is free")
	require.Equal(t, "2", remaining("X-Idempotency-Key", "order-1"), "two free repeats")
	require.Equal(t, "1", remaining("X-Idempotency-Key", "order-1"), "then counted: the header is no bypass")
	require.Equal(t, "0", remaining("X-Idempotency-Key", "order-2"))
	w := do(h, "POST", "/pay", "192.0.2.1:1", "X-Idempotency-Key", "order-3")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	// A denied request was not admitted: its retry is not free either.
	require.Equal(t, http.StatusTooManyRequests, do(h, "POST", "/pay", "192.0.2.1:1", "X-Idempotency-Key", "order-3").Code)
	// Another identity's key of the same name is its own.
	require.Equal(t, "2", do(h, "POST", "/pay", "192.0.2.2:1", "X-Idempotency-Key", "order-1").Result().Header.Get("X-RateLimit-Remaining"))
	// After the TTL the key is forgotten.
	f.mu.Lock()
	f.now = f.now.Add(6 * time.Minute)
	f.mu.Unlock()
	require.Equal(t, "2", remaining("X-Idempotency-Key", "order-1"))
	require.Equal(t, "2", remaining("X-Idempotency-Key", "order-1"))
}
