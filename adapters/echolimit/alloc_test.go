package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/echolimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// An allowed request costs the middleware four allocations over the bare
// Echo: its state (the view, the Decision, header values and context in
// one allocation), the closure Echo builds around each middleware, and
// Echo's store that holds the Decision.
func TestMiddlewareAllocations(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: keyfunc.IP(), Limit: core.Per(1_000_000_000, time.Second)}})
	require.NoError(t, err)
	allocs := func(mw ...echo.MiddlewareFunc) float64 {
		e := echo.New()
		e.Use(mw...)
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "203.0.113.7:4000"
		w := discard{} // bench_test.go's: the writer keeps nothing
		return leastAllocs(func() {
			clear(w)
			e.ServeHTTP(w, req)
		})
	}
	bare, limited := allocs(), allocs(echolimit.New(l))
	require.LessOrEqual(t, limited-bare, 4.0+raceAllocs, "bare %v, limited %v", bare, limited)
}

// leastAllocs is the fewest allocations f makes in a run, over five
// measurements: testing.AllocsPerRun counts every goroutine's allocations,
// and one that another test left running (a breaker probing a stopped
// Redis, say) only ever adds to them.
func leastAllocs(f func()) float64 {
	least := testing.AllocsPerRun(100, f)
	for range 4 {
		time.Sleep(time.Millisecond)
		least = min(least, testing.AllocsPerRun(100, f))
	}
	return least
}
