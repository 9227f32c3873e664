package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// The Formatter's cache does not mix up two policies of the same limit, nor
// one policy whose limit is changed by SetPolicies.
func TestFormatterCacheFollowsThePolicies(t *testing.T) {
	f := newFixture(t)
	ip := keyfunc.IP()
	l := f.limiter(t, nil, core.Policy{Name: "a", Key: ip, Limit: core.PerMinute(10)})
	h := httplimit.New(l)(ok)
	policy := func() string {
		return do(h, "GET", "/", "192.0.2.1:1").Result().Header.Get("RateLimit-Policy")
	}
	require.Equal(t, `"a";q=10;w=60`, policy())
	require.NoError(t, l.SetPolicies([]core.Policy{{Name: "b", Key: ip, Limit: core.PerMinute(10)}}))
	require.Equal(t, `"b";q=10;w=60`, policy())
	require.NoError(t, l.SetPolicies([]core.Policy{{Name: "b", Key: ip, Limit: core.PerMinute(20)}}))
	require.Equal(t, `"b";q=20;w=60`, policy())
	require.NoError(t, l.SetPolicies([]core.Policy{{Name: "b", Key: ip, Limit: core.Per(20, 2*time.Minute)}}))
	require.Equal(t, `"b";q=20;w=120`, policy())
	require.NoError(t, l.SetPolicies([]core.Policy{{Name: "b", Key: ip, Limit: core.Per(20, 2*time.Minute)}, {Name: "a", Key: ip, Limit: core.Per(20, 2*time.Minute)}}))
	require.Equal(t, `"b";q=20;w=120, "a";q=20;w=120`, policy())
}

// An allowed request costs the middleware one allocation (its Scratch) with
// the default headers, an IP policy and the memory store.
func TestMiddlewareAllocatesOnce(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, nil, ipPolicy(t, "per-ip", core.PerMinute(1_000_000_000)))
	var seen *core.Decision
	h := httplimit.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = httplimit.DecisionFrom(r.Context())
		w.WriteHeader(http.StatusOK)
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:4242"
	w := &nopWriter{h: http.Header{}}
	h.ServeHTTP(w, r)
	require.NotNil(t, seen)
	require.Len(t, w.h, 6)
	allocs := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	require.LessOrEqual(t, allocs, 1.0)
	require.True(t, seen.Allowed)
}

// One middleware serves concurrent requests under alternating limits: its
// Formatter's cache and clock are shared, and every response gets its own
// policy's headers.
func TestFormatterConcurrentRequests(t *testing.T) {
	f := newFixture(t)
	tiering := core.Tiering{
		Key:     keyfunc.Header("X-Tier"),
		Resolve: func(_ context.Context, id string) (string, error) { return id, nil },
	}
	tiers := map[string]core.Limit{}
	for i := range 100 {
		tiers[fmt.Sprint(i)] = core.PerHour(int64(1000 + i))
	}
	l := f.limiter(t, []core.LimiterOption{core.WithTiering(tiering)},
		core.Policy{Name: "tiered", Key: keyfunc.Header("X-Tier"), Limit: core.PerHour(5), Tiers: tiers})
	h := httplimit.New(l)(ok)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				tier := (g*31 + i) % 100
				w := do(h, "GET", "/", "192.0.2.1:1", "X-Tier", fmt.Sprint(tier))
				want := fmt.Sprintf(`"tiered";q=%d;w=3600`, 1000+tier)
				if got := w.Result().Header.Get("RateLimit-Policy"); got != want {
					errs <- fmt.Sprintf("tier %d: RateLimit-Policy %q, want %q", tier, got, want)
					return
				}
				if got := w.Result().Header.Get("X-RateLimit-Limit"); got != fmt.Sprint(1000+tier) {
					errs <- fmt.Sprintf("tier %d: X-RateLimit-Limit %q", tier, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
