package remotestore_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/service/remotestore"
)

// An app on net/http whose limiter's store is ratelimitd (behind a guard),
// the service on Redis: a burst from one client gets 200 up to the limit,
// then 429 with Retry-After and the RateLimit fields, and a second app
// instance on the same service shares the count.
func TestAppStack(t *testing.T) {
	rs, err := newRedisStore(t, redistest.StartServer(t))
	require.NoError(t, err)
	srv := serve(t, rs.store, "127.0.0.1:0")

	app := func() *httptest.Server {
		gs, err := guard.New(remotestore.New(dial(t, srv.addr)), guard.WithTimeout(time.Second), guard.WithFailOpen())
		require.NoError(t, err)
		lim, err := core.NewLimiter(gs, []core.Policy{{Name: "per-client", Key: keyfunc.Header("X-Client"), Limit: core.PerMinute(5)}})
		require.NoError(t, err)
		hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
		s := httptest.NewServer(httplimit.New(lim)(hello))
		t.Cleanup(s.Close)
		return s
	}
	a, b := app(), app()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(base, who string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, base+"/hello", nil)
		require.NoError(t, err)
		req.Header.Set("X-Client", who)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var codes []int
	for i := range 8 {
		base := a.URL
		if i%2 == 1 {
			base = b.URL
		}
		resp := get(base, "alice")
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
		}
		require.Equal(t, fmt.Sprintf(`"per-client";r=%d;t=`, max(0, 4-i)), resp.Header.Get("RateLimit")[:len(fmt.Sprintf(`"per-client";r=%d;t=`, max(0, 4-i)))])
	}
	require.Equal(t, []int{200, 200, 200, 200, 200, 429, 429, 429}, codes)
	require.Equal(t, http.StatusOK, get(a.URL, "bob").StatusCode, "another client has its own limit")
}
