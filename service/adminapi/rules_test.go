package adminapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRulesCRUDWithETags(t *testing.T) { onEach(t, testRulesCRUDWithETags) }

func testRulesCRUDWithETags(t *testing.T, e *env) {
	r := e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "/api/v1/rules/orders", r.header.Get("Location"))
	etag := r.header.Get("ETag")
	require.Equal(t, e.etag(1), etag)
	require.Equal(t, etag, r.body["etag"])
	require.Equal(t, true, r.body["enabled"], "enabled by default")
	require.EqualValues(t, 5, r.body["limit"])

	r = e.req("GET", "/api/v1/rules/orders", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, etag, r.header.Get("ETag"))
	require.Equal(t, "Orders", r.body["name"])

	r = e.req("GET", "/api/v1/rules/orders", "", "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, r.status)
	require.Empty(t, r.raw)
	require.Equal(t, etag, r.header.Get("ETag"))
	r = e.req("GET", "/api/v1/rules/orders", "", "If-None-Match", `"nope", W/`+etag)
	require.Equal(t, http.StatusNotModified, r.status, "weak comparison")
	r = e.req("GET", "/api/v1/rules/orders", "", "If-None-Match", `"nope"`)
	require.Equal(t, http.StatusOK, r.status)
	r = e.req("HEAD", "/api/v1/rules/orders", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.raw)

	updated := `{"name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":10,"window_seconds":60,"algorithm":"fixed_window"}`
	requireProblem(t, e.req("PUT", "/api/v1/rules/orders", updated), http.StatusPreconditionRequired, "If-Match")
	requireProblem(t, e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", `"99"`), http.StatusPreconditionFailed, "If-Match")
	requireProblem(t, e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", "W/"+etag), http.StatusPreconditionFailed, "If-Match")
	require.EqualValues(t, e.rev(1), e.revision())

	r = e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", etag)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	etag2 := r.header.Get("ETag")
	require.Equal(t, e.etag(2), etag2)
	require.EqualValues(t, 10, r.body["limit"])

	// The old etag is stale now, for PUT and DELETE.
	requireProblem(t, e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", etag), http.StatusPreconditionFailed, "If-Match")
	requireProblem(t, e.req("DELETE", "/api/v1/rules/orders", ""), http.StatusPreconditionRequired, "If-Match")
	requireProblem(t, e.req("DELETE", "/api/v1/rules/orders", "", "If-Match", etag), http.StatusPreconditionFailed, "If-Match")
	// A GET's body can be written back as it is (read-only members ignored).
	r = e.req("GET", "/api/v1/rules/orders", "")
	r = e.req("PUT", "/api/v1/rules/orders", r.raw, "If-Match", `"nope", `+etag2)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	etag3 := r.header.Get("ETag")
	require.Equal(t, e.etag(3), etag3)

	requireProblem(t, e.req("POST", "/api/v1/rules", ordersRule), http.StatusConflict, "id")
	require.EqualValues(t, e.rev(3), e.revision())

	r = e.req("DELETE", "/api/v1/rules/orders", "", "If-Match", etag3)
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	requireProblem(t, e.req("GET", "/api/v1/rules/orders", ""), http.StatusNotFound, "id")
	requireProblem(t, e.req("DELETE", "/api/v1/rules/orders", "", "If-Match", "*"), http.StatusNotFound, "id")
	requireProblem(t, e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", "*"), http.StatusNotFound, "id")

	// * matches any current etag.
	r = e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	r = e.req("PUT", "/api/v1/rules/orders", updated, "If-Match", "*")
	require.Equal(t, http.StatusOK, r.status, r.raw)
}

// A rule's lease_seconds is stored and served as written, and the
// engine's rule gets it; a lease no rule can have (a sliding window log's,
// a negative one) is a 400 naming lease_seconds.
func TestRuleLease(t *testing.T) { onEach(t, testRuleLease) }

func testRuleLease(t *testing.T, e *env) {
	r := e.req("POST", "/api/v1/rules", `{"id":"global","name":"Global","dimension":"all","limit":500000,"window_seconds":1,"algorithm":"fixed_window","lease_seconds":0.1}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, 0.1, r.body["lease_seconds"])
	r = e.req("GET", "/api/v1/rules/global", "")
	require.Equal(t, 0.1, r.body["lease_seconds"])
	eventually(t, func() bool {
		rs := e.eng.Snapshot().Rules()
		return len(rs) == 1 && rs[0].Lease == 100*time.Millisecond
	}, "the engine's rule has the lease")
	requireProblem(t, e.req("POST", "/api/v1/rules", `{"id":"log","name":"Log","dimension":"user","limit":5,"window_seconds":1,"algorithm":"sliding_window_log","lease_seconds":0.1}`), http.StatusBadRequest, "lease_seconds")
	requireProblem(t, e.req("POST", "/api/v1/rules", `{"id":"neg","name":"Neg","dimension":"ip","limit":5,"window_seconds":1,"algorithm":"token_bucket","lease_seconds":-1}`), http.StatusBadRequest, "lease_seconds")
}
