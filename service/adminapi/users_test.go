package adminapi

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// inForce waits until the engine decides under revision rev or later.
func (e *env) inForce(n int64) {
	rev := e.rev(n)
	e.t.Helper()
	eventually(e.t, func() bool {
		n, err := strconv.ParseInt(e.eng.Snapshot().Revision(), 10, 64)
		return err == nil && n >= rev
	}, "the engine loads the revision written")
}

// check asks the check API for identifier on endpoint, returning whether
// it was allowed and the limit reported.
func (e *env) check(identifier, endpoint string) (bool, int64) {
	e.t.Helper()
	r := e.raw("POST", "/api/v1/rate-limit/check",
		`{"key_type":"user","key_value":"`+identifier+`","endpoint":"`+endpoint+`"}`, "Content-Type", "application/json")
	require.Equal(e.t, http.StatusOK, r.status, r.raw)
	return r.body["allowed"].(bool), int64(r.body["limit"].(float64))
}

// TestCheckDecidedByRulesOfTheAPI creates, changes and deletes a rule
// through the API and watches checks of the HTTP check API follow.
func TestCheckDecidedByRulesOfTheAPI(t *testing.T) { onEach(t, testCheckDecidedByRulesOfTheAPI) }

func testCheckDecidedByRulesOfTheAPI(t *testing.T, e *env) {
	ok, _ := e.check("alice", "/api/orders/1")
	require.True(t, ok, "no rule: allowed")

	r := e.req("POST", "/api/v1/rules", `{"id":"orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":3,"window_seconds":3600,"algorithm":"fixed_window"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	e.inForce(1)
	for i := range 3 {
		ok, limit := e.check("alice", "/api/orders/1")
		require.True(t, ok, "check %d", i)
		require.EqualValues(t, 3, limit)
	}
	ok, _ = e.check("alice", "/api/orders/1")
	require.False(t, ok, "the 4th check is over the rule's limit")
	ok, _ = e.check("alice", "/api/other")
	require.True(t, ok, "another endpoint is not limited")

	// A gold tier row and alice's tier raise her limit.
	r = e.req("POST", "/api/v1/rules", `{"id":"orders-gold","dimension":"user","endpoint_pattern":"/api/orders/**","limit":10,"window_seconds":3600,"algorithm":"fixed_window","tier":"gold"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	r = e.req("PUT", "/api/v1/users/alice/tier", `{"tier":"gold"}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, map[string]any{"dimension": "user", "identifier": "alice", "tier": "gold"}, r.body)
	e.inForce(3)
	ok, limit := e.check("alice", "/api/orders/1")
	require.True(t, ok)
	require.EqualValues(t, 10, limit)
	ok, limit = e.check("bob", "/api/orders/1")
	require.True(t, ok)
	require.EqualValues(t, 3, limit, "bob has no tier")

	// Clearing the tier: the base limit again.
	r = e.req("PUT", "/api/v1/users/alice/tier", `{"tier":""}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	e.inForce(4)
	_, limit = e.check("alice", "/api/orders/1")
	require.EqualValues(t, 3, limit)

	// Disabled, then deleted: no longer limits.
	r = e.req("DELETE", "/api/v1/rules/orders-gold", "", "If-Match", e.etag(2))
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	r = e.req("PUT", "/api/v1/rules/orders", `{"dimension":"user","endpoint_pattern":"/api/orders/**","limit":3,"window_seconds":3600,"algorithm":"fixed_window","enabled":false}`, "If-Match", e.etag(1))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	e.inForce(6)
	for range 5 {
		ok, _ := e.check("carol", "/api/orders/1")
		require.True(t, ok, "a disabled rule limits nothing")
	}
}

// TestOverrideRoundTrip sets, lists, replaces and clears overrides.
func TestOverrideRoundTrip(t *testing.T) { onEach(t, testOverrideRoundTrip) }

func testOverrideRoundTrip(t *testing.T, e *env) {
	// The API's clock; the database checks expiries against the real one.
	now := time.Now().UTC().Truncate(time.Second)
	e.setNow(now)
	r := e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)

	r = e.req("POST", "/api/v1/users/alice/override", `{"rule_id":"orders","limit":50,"window_seconds":60,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "/api/v1/users/alice/override/orders?dimension=user", r.header.Get("Location"))
	require.Equal(t, map[string]any{"dimension": "user", "identifier": "alice", "rule_id": "orders", "limit": 50.0,
		"window_seconds": 60.0, "block": false, "expires_at": now.Add(10 * time.Minute).Format(time.RFC3339), "revision": float64(e.rev(2))}, r.body)

	until := now.Add(time.Hour)
	r = e.req("POST", "/api/v1/users/alice/override", `{"rule_id":"orders","block":true,"expires_at":"`+until.In(time.FixedZone("", 2*3600)).Format(time.RFC3339)+`"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, true, r.body["block"])
	require.Equal(t, until.Format(time.RFC3339), r.body["expires_at"])

	r = e.req("GET", "/api/v1/users/alice/override", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Len(t, r.body["overrides"], 1, "the second replaced the first")
	r = e.req("GET", "/api/v1/users/bob/override", "")
	require.Equal(t, `{"overrides":[]}`+"\n", r.raw)

	// An identifier with a slash and spaces, escaped in the path.
	r = e.req("POST", "/api/v1/users/a%2Fb%20c/override", `{"rule_id":"orders","block":true,"ttl_seconds":60}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "a/b c", r.body["identifier"])
	require.Equal(t, "/api/v1/users/a%2Fb%20c/override/orders?dimension=user", r.header.Get("Location"))

	// Lapsed at its instant: no longer listed, with no write.
	rev := e.revision()
	e.setNow(now.Add(24 * time.Hour))
	r = e.req("GET", "/api/v1/users/alice/override", "")
	require.Equal(t, `{"overrides":[]}`+"\n", r.raw)
	require.Equal(t, rev, e.revision())

	r = e.req("DELETE", "/api/v1/users/a%2Fb%20c/override/orders", "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	r = e.req("DELETE", "/api/v1/users/a%2Fb%20c/override/orders", "")
	requireProblem(t, r, http.StatusNotFound, "rule")
}
