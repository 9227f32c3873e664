package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// An allowed request costs the middleware three allocations over the bare
// engine: its state (the Decision, header values and context in one
// Scratch) and gin's Keys map that holds the Decision.
func TestMiddlewareAllocations(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	l, err := core.NewLimiter(store, []core.Policy{{Name: "per-ip", Key: keyfunc.IP(), Limit: core.Per(1_000_000_000, time.Second)}})
	require.NoError(t, err)
	allocs := func(mw ...gin.HandlerFunc) float64 {
		e := gin.New()
		e.Use(mw...)
		e.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "203.0.113.7:4000"
		w := discard{} // bench_test.go's: the writer keeps nothing
		return leastAllocs(func() {
			clear(w)
			e.ServeHTTP(w, req)
		})
	}
	bare, limited := allocs(), allocs(ginlimit.New(l))
	require.LessOrEqual(t, limited-bare, 3.0+raceAllocs, "bare %v, limited %v", bare, limited)
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
