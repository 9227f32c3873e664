package main

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Two `ratelimitd serve --db postgres://… --redis …` instances: a token's
// admin write limit (100 a minute) holds across both, exactly, because the
// counter is in the shared Redis; reads and other tokens are not touched;
// an Idempotency-Key used through one instance is replayed by the other.
func TestServeAdminLimitsAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := pg.NewDatabase(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	writer, _, err := db.CreateToken(ctx, "cli:test", "deploy-bot", rulesdb.ScopeWrite)
	require.NoError(t, err)
	other, _, err := db.CreateToken(ctx, "cli:test", "other-bot", rulesdb.ScopeWrite)
	require.NoError(t, err)
	redis := redistest.StartServer(t)
	args := []string{"--db", dsn, "--redis", "redis://" + redis.Addr, "--store-timeout", "2s"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})

	// An idempotent create through A, replayed through B.
	body := `{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":5,"window_seconds":60,"algorithm":"fixed_window"}`
	first := adminCall(t, c, a, writer, "POST", "/api/v1/rules", body, "Idempotency-Key", "create-orders")
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	again := adminCall(t, c, b, writer, "POST", "/api/v1/rules", body, "Idempotency-Key", "create-orders")
	require.Equal(t, http.StatusCreated, again.status, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.raw, again.raw)

	// 98 more writes (refused bodies count too: the limit is checked
	// first), concurrently across both instances: all admitted.
	var wg sync.WaitGroup
	codes := make([]int, 98)
	for i := range codes {
		p := []*ratelimitdtest.Daemon{a, b}[i%2]
		wg.Go(func() {
			codes[i] = adminCall(t, c, p, writer, "POST", "/api/v1/rules", `{}`, "X-Request-Id", "w"+strconv.Itoa(i)).status
		})
	}
	wg.Wait()
	for i, code := range codes {
		require.Equal(t, http.StatusBadRequest, code, "write %d", i+3)
	}
	// The 101st write in the minute, on either instance, is 429.
	for _, p := range []*ratelimitdtest.Daemon{a, b} {
		r := adminCall(t, c, p, writer, "DELETE", "/api/v1/rules/orders", "", "If-Match", "*")
		require.Equal(t, http.StatusTooManyRequests, r.status, r.raw)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, ra >= 1 && ra <= 60, ra)
		require.Equal(t, `"admin_write";q=100;w=60`, r.header.Get("RateLimit-Policy"))
		require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	}
	_, err = db.Get(ctx, "orders")
	require.NoError(t, err, "the refused delete changed nothing")

	// Reads of the same token, and another token's writes, go on.
	r := adminCall(t, c, b, writer, "GET", "/api/v1/rules/orders", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, `"admin_read";q=1000;w=60`, r.header.Get("RateLimit-Policy"))
	r = adminCall(t, c, a, other, "DELETE", "/api/v1/rules/orders", "", "If-Match", "*")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)

	for _, p := range []*ratelimitdtest.Daemon{a, b} {
		require.NoError(t, p.Close(), p.Logs())
		require.NotContains(t, p.Logs(), writer)
		require.NotContains(t, p.Logs(), other)
	}
}
