package httplimit_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestDegradedDecisions: behind a guard whose store has failed, a request
// failed open carries no quota headers (the quota is unknown, and a zero
// would make clients back off); a fail-closed one is a 429 with the guard's
// Retry-After; a fallback one carries the local limiter's headers.
func TestDegradedDecisions(t *testing.T) {
	cases := []struct {
		name  string
		opt   guard.Option
		check func(t *testing.T, rec *httptest.ResponseRecorder)
	}{
		{"open", guard.WithFailOpen(), func(t *testing.T, rec *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusOK, rec.Code)
			for _, h := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-State", "Retry-After"} {
				require.Empty(t, rec.Header().Values(h), h)
			}
		}},
		{"closed", guard.WithFailClosed(2 * time.Second), func(t *testing.T, rec *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusTooManyRequests, rec.Code)
			require.Equal(t, "2", rec.Header().Get("Retry-After"))
			require.Equal(t, "10", rec.Header().Get("X-RateLimit-Limit"))
			require.Equal(t, `"per-ip";r=0;t=2`, rec.Header().Get("RateLimit"))
		}},
		{"fallback", guard.WithFallback(2), func(t *testing.T, rec *httptest.ResponseRecorder) {
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, "5", rec.Header().Get("X-RateLimit-Limit"))
			n, err := strconv.Atoi(rec.Header().Get("X-RateLimit-Remaining"))
			require.NoError(t, err)
			require.Equal(t, 4, n)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backend, err := memorystore.New()
			require.NoError(t, err)
			require.NoError(t, backend.Close()) // fails like a dead Redis
			g, err := guard.New(backend, c.opt, guard.WithLogger(slog.New(slog.DiscardHandler)))
			require.NoError(t, err)
			defer g.Close()
			ip := keyfunc.IP()
			lim, err := core.NewLimiter(g, []core.Policy{{Name: "per-ip", Key: ip, Limit: core.PerMinute(10)}})
			require.NoError(t, err)
			var seen *core.Decision
			h := httplimit.New(lim)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				seen, _ = httplimit.DecisionFrom(r.Context())
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			c.check(t, rec)
			if rec.Code == http.StatusOK {
				require.NotNil(t, seen)
				require.True(t, seen.Degraded(), "the handler can see the decision was degraded")
			}
		})
	}
}
