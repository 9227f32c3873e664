package adaptertest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/sftest"
	"github.com/sluicehq/sluice/keyfunc"
)

// stacked: a global middleware and one on the route are two Limiters,
// each counting on its own; the request's headers and Decision are their
// merge (middleware.Merge), naming the most constraining policy, and each
// middleware refunds only its own admission.
func stacked(t *testing.T, h Harness) {
	t.Run("FirstBinds", func(t *testing.T) { stackedFirstBinds(t, h) })
	t.Run("SecondDenies", func(t *testing.T) { stackedSecondDenies(t, h) })
}

// policyParams is the parameters of the member name of res's
// RateLimit-Policy.
func policyParams(t *testing.T, res Response, name string) map[string]int64 {
	t.Helper()
	return member(t, res.Header.Get("RateLimit-Policy"), name).Params
}

// bindingMember is res's one RateLimit member: the binding policy's.
func bindingMember(t *testing.T, res Response) sftest.Member {
	t.Helper()
	ms := sftest.List(t, res.Header.Get("RateLimit"))
	require.Len(t, ms, 1)
	return ms[0]
}

// stackedFirstBinds: under a global limit of 3 and a route's of 5, the
// global one binds, and denies.
func stackedFirstBinds(t *testing.T, h Harness) {
	st := memStore(t)
	login, err := core.NewLimiter(st, []core.Policy{{Name: "login", Key: keyfunc.IP(), Limit: core.PerMinute(5)}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: limiter(t, st, nil, core.PerMinute(3)), Routes: map[string]Route{"login": {Limiter: login}}})
	res := s.Do(t, Request{Path: "/login"})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, map[string]int64{"q": 3, "w": 60}, policyParams(t, res, "per-ip"), "both policies are listed")
	require.Equal(t, map[string]int64{"q": 5, "w": 60}, policyParams(t, res, "login"))
	require.Equal(t, "per-ip", bindingMember(t, res).Name, "the fewest remaining binds: the global policy")
	require.EqualValues(t, 2, bindingMember(t, res).Params["r"])
	require.Equal(t, "3", res.Header.Get("X-RateLimit-Limit"))
	require.Equal(t, "2", res.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "per-ip normal 2", res.Header.Get(HeaderDecision), "DecisionFrom is the merge")

	res = s.Do(t, Request{})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, `"per-ip";q=3;w=60`, res.Header.Get("RateLimit-Policy"), "another route: the global limiter alone")
	res = s.Do(t, Request{Path: "/login"})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "per-ip warning 0", res.Header.Get(HeaderDecision))
	checkProblem(t, s.Do(t, Request{Path: "/login"}), "per-ip")
	require.EqualValues(t, 3, s.Runs())
}

// stackedSecondDenies: under a global limit of 100 and a route's of 2
// refunded on failure, the route's binds and denies; each middleware
// refunds only its own admission.
func stackedSecondDenies(t *testing.T, h Harness) {
	st := memStore(t)
	login, err := core.NewLimiter(st, []core.Policy{{Name: "login", Key: keyfunc.IP(), Limit: core.PerMinute(2), Refund: core.RefundFailed}})
	require.NoError(t, err)
	s := h.Start(t, Setup{Limiter: limiter(t, st, nil, core.PerMinute(100)), Routes: map[string]Route{"login": {Limiter: login}}})
	res := s.Do(t, Request{Path: "/login"})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "login", bindingMember(t, res).Name, "the fewest remaining binds: the route's policy")
	require.Equal(t, "login normal 1", res.Header.Get(HeaderDecision))

	// A failed response: the route's middleware refunds its own
	// admission; the global one (no refund rule) keeps its own.
	res = s.Do(t, Request{Path: "/login", Header: http.Header{HeaderStatus: {"500"}}})
	require.Equal(t, http.StatusInternalServerError, res.Status)
	res = s.Do(t, Request{Path: "/login"})
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "login warning 0", res.Header.Get(HeaderDecision), "the refund gave the route's unit back")
	require.Equal(t, map[string]int64{"q": 100, "w": 60}, policyParams(t, res, "per-ip"))

	res = s.Do(t, Request{Path: "/login"})
	p := checkProblem(t, res, "login")
	require.NotEmpty(t, p.Detail)
	require.Equal(t, "login", bindingMember(t, res).Name, "the denying policy binds")
	require.Equal(t, "30", res.Header.Get("Retry-After"), "one token in 30 s")
	require.Contains(t, res.Header.Get("RateLimit-Policy"), `"per-ip";q=100;w=60`, "the global policy is still listed")
	require.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"))

	// The global middleware counted every request, the denied one
	// and the refunded one included: it counts on its own.
	res = s.Do(t, Request{})
	require.Equal(t, "per-ip normal 95", res.Header.Get(HeaderDecision))
	require.EqualValues(t, 4, s.Runs())
}
