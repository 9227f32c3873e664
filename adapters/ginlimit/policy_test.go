package ginlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/ginlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// The policy layer through Gin: several policies all or nothing, route
// matching, shadow, tiers, an override, refunds after the response and
// idempotent retries.
func TestPoliciesThroughGin(t *testing.T) {
	// Redis expiries are absolute: the test clock runs an hour ahead.
	now := time.Now().Add(time.Hour).Truncate(time.Hour)
	clock := func() time.Time { return now }
	t.Run("memory", func(t *testing.T) {
		store, err := memorystore.New(memorystore.WithClock(clock))
		require.NoError(t, err)
		defer store.Close()
		testPolicies(t, store, now)
	})
	t.Run("redis", func(t *testing.T) {
		client := redistest.StartServer(t).Client(t)
		store, err := redisstore.New(client, redisstore.WithClock(clock), redisstore.WithTimeout(5*time.Second))
		require.NoError(t, err)
		testPolicies(t, store, now)
	})
}

func testPolicies(t *testing.T, store core.Store, now time.Time) {
	gin.SetMode(gin.TestMode)
	ip := keyfunc.IP()
	user := keyfunc.Header("X-User")
	l, err := core.NewLimiter(store, []core.Policy{
		{Name: "ip", Key: ip, Limit: core.PerMinute(6)},
		{Name: "user", Key: user, Limit: core.PerMinute(3), Refund: core.RefundFailed, Match: core.Match{Routes: []string{"/api/**"}},
			Tiers: map[string]core.Limit{"gold": core.PerMinute(100)}},
		{Name: "trial", Key: user, Limit: core.PerMinute(1), Shadow: true},
	}, core.WithTiering(core.Tiering{Key: user, Resolve: func(_ context.Context, id string) (string, error) {
		if id == "goldie" {
			return "gold", nil
		}
		return "", nil
	}}), core.WithIdempotency(core.Idempotency{}))
	require.NoError(t, err)
	r := gin.New()
	r.Use(ginlimit.New(l))
	status := http.StatusOK
	r.GET("/api/x", func(c *gin.Context) { c.Status(status) })
	r.GET("/public", func(c *gin.Context) { c.Status(http.StatusOK) })
	send := func(path, remote, u string, hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = remote
		req.Header.Set("X-User", u)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	// Failed responses are not counted by "user" (refund), but "ip" counts them.
	status = http.StatusBadGateway
	for range 2 {
		require.Equal(t, http.StatusBadGateway, send("/api/x", "192.0.2.1:1", "ann").Code)
	}
	status = http.StatusOK
	var codes []int
	for range 4 {
		codes = append(codes, send("/api/x", "192.0.2.1:1", "ann").Code)
	}
	require.Equal(t, []int{200, 200, 200, 429}, codes, "three for ann; the shadow trial never denies")
	w := send("/api/x", "192.0.2.1:1", "ann")
	require.Contains(t, w.Body.String(), `"violated-policies":["user"]`)
	// The denied requests consumed nothing from "ip": 2 + 3 admitted of 6.
	w = send("/public", "192.0.2.1:1", "ann") // only "ip" and "trial" match here
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
	require.NotContains(t, w.Header().Get("RateLimit-Policy"), `"user"`)
	// A gold user gets the tier's limit.
	w = send("/api/x", "192.0.2.2:1", "goldie")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Header().Get("RateLimit-Policy"), `"user";q=100`)
	// An override raises ann's user limit at once.
	require.NoError(t, l.SetOverride(context.Background(), "user", "ann", core.PerMinute(50), now.Add(time.Hour)))
	require.Equal(t, http.StatusOK, send("/api/x", "192.0.2.3:1", "ann").Code)
	// An idempotent retry is free.
	first := send("/api/x", "192.0.2.4:1", "bea", "X-Idempotency-Key", "p-1").Header().Get("X-RateLimit-Remaining")
	again := send("/api/x", "192.0.2.4:1", "bea", "X-Idempotency-Key", "p-1").Header().Get("X-RateLimit-Remaining")
	require.Equal(t, first, again)
}
