package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/rules"
)

// TestStoreFailureNeverLeaks: on a real Redis, checks work; with the Redis
// process killed, the answer is 503 problem+json with a generic detail in
// both modes, and the cause goes to the log only.
func TestStoreFailureNeverLeaks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redis := redistest.StartServer(t)
	st, err := redisstore.New(redis.Client(t), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(ctx, st, rules.NewFile("testdata/rules.yaml"))
	require.NoError(t, err)
	var logs bytes.Buffer
	mux := http.NewServeMux()
	mux.Handle(httpapi.Path, httpapi.New(e, httpapi.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	srv := httptest.NewServer(openapitest.New(t).Handler(t, mux))
	t.Cleanup(srv.Close)

	for i := range 3 {
		r := post(t, srv.URL+httpapi.Path, `{"key_type":"ip","key_value":"10.8.8.8"}`)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, float64(2-i), r.body["remaining"])
	}
	require.Equal(t, http.StatusTooManyRequests, get(t, srv.URL+httpapi.Path+"?mode=status&key_type=ip&key_value=10.8.8.8").status)

	redis.Kill()
	for _, r := range []reply{
		post(t, srv.URL+httpapi.Path, `{"key_type":"ip","key_value":"10.8.8.8"}`),
		get(t, srv.URL+httpapi.Path+"?mode=status&key_type=ip&key_value=10.8.8.8"),
	} {
		require.Equal(t, http.StatusServiceUnavailable, r.status, r.raw)
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		require.Equal(t, "the rate limit decision could not be made", r.body["detail"])
		for _, leak := range []string{redis.Addr, "refused", "dial", "redis", "eof", "connection"} {
			require.NotContains(t, strings.ToLower(r.raw), leak)
		}
	}
	require.Contains(t, logs.String(), "httpapi: check failed")
}
