package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// NewAuthenticated serves the API to requests whose context names their
// caller: without one every request is 401, a read-scope caller's writes
// are 403, and neither reads nor writes anything; a write-scope caller's
// write is the API's own, audited under the caller's name with the
// request id of its context.
func TestNewAuthenticated(t *testing.T) {
	e := newEnv(t)
	h, err := NewAuthenticated(Options{DB: e.db, Engine: e.eng})
	require.NoError(t, err)
	body := `{"id": "pg", "dimension": "user", "limit": 5, "window_seconds": 60, "algorithm": "gcra"}`
	send := func(ctx context.Context, method, path, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	before := e.revision()
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		w := send(e.ctx, m, Prefix+"/rules", body)
		require.Equal(t, http.StatusUnauthorized, w.Code, "%s without a principal", m)
		require.Contains(t, w.Body.String(), "no authenticated caller")
	}
	reader := adminauth.WithPrincipal(e.ctx, adminauth.Principal{Name: "reader", Scope: rulesdb.ScopeRead})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		require.Equal(t, http.StatusForbidden, send(reader, m, Prefix+"/rules/pg", body).Code, "%s by a read token", m)
	}
	require.Equal(t, http.StatusOK, send(reader, http.MethodGet, Prefix+"/rules", "").Code)
	require.Equal(t, before, e.revision(), "nothing written")

	ctx := rulesdb.WithRequestID(adminauth.WithPrincipal(e.ctx, adminauth.Principal{Name: "ann", Scope: rulesdb.ScopeWrite}), "page-req-1")
	w := send(ctx, http.MethodPost, Prefix+"/rules", body)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	require.Equal(t, fmt.Sprintf(`"%d"`, before+1), w.Header().Get("ETag"))
	log, _, err := e.db.AuditQuery(e.ctx, rulesdb.AuditFilter{Target: "rule/pg", Limit: 10})
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "ann", log[0].Actor)
	require.Equal(t, "rule.create", log[0].Action)
	require.Equal(t, "page-req-1", log[0].RequestID)
}
