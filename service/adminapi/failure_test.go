package adminapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDatabaseFailure: with the database gone every resource answers 503
// with a generic detail, never the database's text, and logs the cause.
func TestDatabaseFailure(t *testing.T) {
	e := newEnv(t)
	r := e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.NoError(t, e.db.Close())
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/rules", ""},
		{"GET", "/api/v1/rules/orders", ""},
		{"POST", "/api/v1/rules", strings.Replace(ordersRule, `"orders"`, `"other"`, 1)},
		{"PUT", "/api/v1/rules/orders", ordersRule},
		{"DELETE", "/api/v1/rules/orders", ""},
		{"PUT", "/api/v1/users/alice/tier", `{"tier":"gold"}`},
		{"GET", "/api/v1/users/alice/override", ""},
		{"POST", "/api/v1/users/alice/override", `{"rule_id":"orders","block":true,"ttl_seconds":60}`},
		{"DELETE", "/api/v1/users/alice/override/orders", ""},
		{"GET", "/api/v1/audit", ""},
	} {
		r := e.req(c.method, c.path, c.body, "If-Match", "*")
		requireProblem(t, r, http.StatusServiceUnavailable, "")
		require.Equal(t, "the rules database is unavailable; try again", r.body["detail"], "%s %s", c.method, c.path)
		require.NotContains(t, strings.ToLower(r.raw), "sql", "%s %s", c.method, c.path)
		require.NotContains(t, r.raw, "closed", "%s %s", c.method, c.path)
	}
	require.Contains(t, e.logs.String(), "adminapi: database failed")
	require.Contains(t, e.logs.String(), "database is closed")
}
