package adminapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// limitOf returns the entry of rule in a limits answer.
func limitOf(t *testing.T, r reply, rule string) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, r.raw)
	for _, x := range r.body["limits"].([]any) {
		if m := x.(map[string]any); m["rule_id"] == rule {
			return m
		}
	}
	require.Failf(t, "no rule in the answer", "%s: %s", rule, r.raw)
	return nil
}

// TestUserLimits follows a caller's limits through checks, a tier, an
// override and a block, each in force in the engine's decisions.
func TestUserLimits(t *testing.T) { onEach(t, testUserLimits) }

func testUserLimits(t *testing.T, e *env) {
	for _, b := range []string{
		`{"id":"orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":5,"window_seconds":3600,"algorithm":"fixed_window"}`,
		`{"id":"orders-gold","dimension":"user","endpoint_pattern":"/api/orders/**","limit":50,"window_seconds":3600,"algorithm":"fixed_window","tier":"gold"}`,
		`{"id":"global","dimension":"user","limit":1000,"window_seconds":3600,"algorithm":"sliding_window_counter","shadow":true}`,
		`{"id":"ips","dimension":"ip","limit":10,"window_seconds":1,"algorithm":"gcra"}`,
	} {
		r := e.req("POST", "/api/v1/rules", b)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	e.inForce(4)
	for range 3 {
		ok, _ := e.check("alice", "/api/orders/1")
		require.True(t, ok)
	}

	r := e.req("GET", "/api/v1/users/alice/limits", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	require.Equal(t, "user", r.body["dimension"])
	require.Equal(t, "alice", r.body["identifier"])
	require.Equal(t, "", r.body["tier"])
	require.Len(t, r.body["limits"], 2, "the user rules, not the ip one nor the tier row")
	o := limitOf(t, r, "orders")
	require.Equal(t, "rule", o["source"])
	require.Equal(t, []any{"/api/orders/**"}, o["endpoint_patterns"])
	require.Equal(t, "fixed_window", o["algorithm"])
	require.EqualValues(t, 5, o["limit"])
	require.EqualValues(t, 3600, o["window_seconds"])
	require.EqualValues(t, 3, o["used"])
	require.EqualValues(t, 2, o["remaining"])
	require.Nil(t, o["override"])
	require.NotNil(t, o["reset_at"])
	g := limitOf(t, r, "global")
	require.EqualValues(t, 3, g["used"])
	require.Equal(t, true, g["shadow"])
	require.Equal(t, []any{}, g["endpoint_patterns"])
	// Reading consumed nothing.
	r = e.req("GET", "/api/v1/users/alice/limits", "")
	require.EqualValues(t, 3, limitOf(t, r, "orders")["used"])

	// A tier: the tier's limit, same counter.
	r = e.req("PUT", "/api/v1/users/alice/tier", `{"tier":"gold"}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	e.inForce(5)
	r = e.req("GET", "/api/v1/users/alice/limits", "")
	require.Equal(t, "gold", r.body["tier"])
	o = limitOf(t, r, "orders")
	require.Equal(t, "tier", o["source"])
	require.EqualValues(t, 50, o["limit"])

	// An override: its limit in force in decisions.
	r = e.req("POST", "/api/v1/users/alice/override", `{"rule_id":"orders","limit":2,"window_seconds":3600,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	e.inForce(6)
	r = e.req("GET", "/api/v1/users/alice/limits", "")
	o = limitOf(t, r, "orders")
	require.Equal(t, "override", o["source"])
	require.EqualValues(t, 2, o["limit"])
	ov := o["override"].(map[string]any)
	require.EqualValues(t, 2, ov["limit"])
	require.Equal(t, false, ov["block"])
	require.EqualValues(t, e.rev(6), ov["revision"])
	allowed := 0
	for range 5 {
		if ok, _ := e.check("alice", "/api/orders/1"); ok {
			allowed++
		}
	}
	require.LessOrEqual(t, allowed, 2, "the override's limit decides")
	ok, _ := e.check("bob", "/api/orders/1")
	require.True(t, ok, "bob has no override")

	// A block: every check denied, reported blocked.
	r = e.req("POST", "/api/v1/users/alice/override", `{"rule_id":"orders","block":true,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	e.inForce(7)
	ok, _ = e.check("alice", "/api/orders/2")
	require.False(t, ok)
	r = e.req("GET", "/api/v1/users/alice/limits", "")
	o = limitOf(t, r, "orders")
	require.Equal(t, true, o["blocked"])
	require.Equal(t, "throttled", o["state"])
	require.Equal(t, true, o["override"].(map[string]any)["block"])

	// Cleared: the tier's limit again.
	r = e.req("DELETE", "/api/v1/users/alice/override/orders", "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	e.inForce(8)
	r = e.req("GET", "/api/v1/users/alice/limits", "")
	o = limitOf(t, r, "orders")
	require.Equal(t, "tier", o["source"])
	require.Equal(t, false, o["blocked"])
	ok, _ = e.check("alice", "/api/orders/3")
	require.True(t, ok)

	// Another dimension; a caller no rule has seen; bad input.
	r = e.req("GET", "/api/v1/users/10.0.0.1/limits?dimension=ip", "")
	require.EqualValues(t, 0, limitOf(t, r, "ips")["used"])
	r = e.req("GET", "/api/v1/users/x/limits?dimension=api_key", "")
	require.Equal(t, `[]`, string(mustJSON(t, r.body["limits"])))
	before := e.revision()
	requireProblem(t, e.req("GET", "/api/v1/users/x/limits?dimension=a%20b", ""), http.StatusBadRequest, "dimension")
	requireProblem(t, e.req("GET", "/api/v1/users/x/limits?tier=gold", ""), http.StatusBadRequest, "tier")
	requireProblem(t, e.req("POST", "/api/v1/users/x/limits", "{}"), http.StatusMethodNotAllowed, "method")
	r = e.raw("GET", "/api/v1/users/alice/limits", "", e.auth("reader")...)
	require.Equal(t, http.StatusOK, r.status, "a read token reads limits")
	require.Equal(t, before, e.revision())
}
