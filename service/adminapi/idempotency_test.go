package adminapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIdempotentPOST: a POST repeated with its Idempotency-Key is answered
// the stored response and writes nothing more; the key with another body
// is refused 422.
func TestIdempotentPOST(t *testing.T) { onEach(t, testIdempotentPOST) }

func testIdempotentPOST(t *testing.T, e *env) {
	r := e.req("POST", "/api/v1/rules", ordersRule, "Idempotency-Key", "create-orders-1")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	rev := e.revision()
	again := e.req("POST", "/api/v1/rules", ordersRule, "Idempotency-Key", "create-orders-1")
	require.Equal(t, http.StatusCreated, again.status, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, r.raw, again.raw)
	require.Equal(t, r.header.Get("ETag"), again.header.Get("ETag"))
	require.Equal(t, r.header.Get("Location"), again.header.Get("Location"))
	require.Equal(t, rev, e.revision(), "a replay writes nothing")

	other := e.req("POST", "/api/v1/rules", strings.Replace(ordersRule, `"limit":5`, `"limit":6`, 1), "Idempotency-Key", "create-orders-1")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, other.raw)
	require.Equal(t, rev, e.revision())

	// Without a key a repeat is a second create: 409.
	requireProblem(t, e.req("POST", "/api/v1/rules", ordersRule), http.StatusConflict, "id")

	o := `{"rule_id":"orders","block":true,"ttl_seconds":600}`
	r = e.req("POST", "/api/v1/users/alice/override", o, "Idempotency-Key", "block-alice")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	rev = e.revision()
	again = e.req("POST", "/api/v1/users/alice/override", o, "Idempotency-Key", "block-alice")
	require.Equal(t, r.raw, again.raw)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, rev, e.revision())
	audit, _, err := e.db.AuditQuery(e.ctx, rulesdbAll())
	require.NoError(t, err)
	require.Len(t, audit, int(rev), "one audit row per revision: the replays wrote none")
}
