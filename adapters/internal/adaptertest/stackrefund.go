package adaptertest

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// stackedRefunds: a global middleware and a route's, on one store, each
// refund their own admission after the response, once: a failed response
// is given back by both, exactly (the global one's units are not given
// back twice, once by each middleware), and a request the route's
// middleware denies is given back by the global one, whose policy refunds
// failed responses (429 is one).
func stackedRefunds(t *testing.T, h Harness) {
	st := memStore(t)
	global, err := core.NewLimiter(st, []core.Policy{{Name: "global", Key: keyfunc.IP(), Limit: core.PerMinute(6), Refund: core.RefundFailed}})
	require.NoError(t, err)
	login, err := core.NewLimiter(st, []core.Policy{{Name: "login", Key: keyfunc.IP(), Limit: core.PerMinute(2), Refund: core.RefundFailed}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: global, Routes: map[string]Route{"login": {Limiter: login}}})
	do := func(path string, status int) Response {
		return s.Do(t, Request{Path: path, Header: http.Header{HeaderStatus: {strconv.Itoa(status)}}})
	}
	for range 2 {
		require.Equal(t, http.StatusOK, do("/", http.StatusOK).Status)
	}
	for i := range 5 {
		res := do("/login", http.StatusInternalServerError)
		require.Equal(t, http.StatusInternalServerError, res.Status, "failed login %d: both limits give it back", i)
		require.Equal(t, "login", res.Ran)
	}
	for range 2 {
		require.Equal(t, http.StatusOK, do("/login", http.StatusOK).Status)
	}
	for i := range 3 {
		res := do("/login", http.StatusOK)
		require.Equal(t, http.StatusTooManyRequests, res.Status, "login %d over the route's limit", i)
		require.Empty(t, res.Ran)
	}
	// The global limit counted 2 + 2 requests: two more pass.
	res := do("/", http.StatusOK)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "1", res.Header.Get("X-RateLimit-Remaining"), "the global limit gave back more, or less, than it counted")
	res = do("/", http.StatusOK)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, http.StatusTooManyRequests, do("/", http.StatusOK).Status)
	require.EqualValues(t, 11, s.Runs())
}
