package fiberlimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/fiberlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestTierCacheKeepsItsOwnStrings: the identities the
// Limiter's tier cache keeps beyond a request must not alias fasthttp's
// buffers, which the next request overwrites: each key is resolved once and
// keeps its own tier, however many requests follow.
func TestTierCacheKeepsItsOwnStrings(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	var mu sync.Mutex
	resolved := map[string]int{}
	tiering := core.Tiering{
		Key: keyfunc.Header("X-API-Key"),
		Resolve: func(_ context.Context, id string) (string, error) {
			mu.Lock()
			resolved[strings.Clone(id)]++
			mu.Unlock()
			if strings.HasPrefix(id, "pro-") {
				return "pro", nil
			}
			return "", nil
		},
	}
	l, err := core.NewLimiter(store, []core.Policy{{
		Name: "p", Key: keyfunc.Header("X-API-Key"), Limit: core.PerMinute(1000),
		Tiers: map[string]core.Limit{"pro": core.PerMinute(5000)},
	}}, core.WithTiering(tiering))
	require.NoError(t, err)
	app := fiber.New()
	app.Use(fiberlimit.New(l))
	app.Get("/", ok)
	const n = 300
	for pass := range 2 {
		for i := range n {
			key := fmt.Sprintf("free-%04d", i)
			if i%50 == 0 {
				key = fmt.Sprintf("pro-%04d", i)
			}
			want := "1000"
			if i%50 == 0 {
				want = "5000"
			}
			res := get(t, app, "/", "X-API-Key", key)
			require.Equal(t, want, res.header.Get("X-RateLimit-Limit"), "pass %d key %s", pass, key)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, resolved, n)
	for id, calls := range resolved {
		require.Equal(t, 1, calls, "%s was resolved again: its cache entry changed under it", id)
	}
}
