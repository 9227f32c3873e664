package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/apiclient"
	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/openapi"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// apiClient is c with its transport behind the OpenAPI document's
// validator: every exchange of the test with ratelimitd's check API and
// admin API must match the document (openapitest).
func apiClient(t *testing.T, c *http.Client) *http.Client {
	t.Helper()
	return openapitest.New(t).Client(t, c)
}

// TestOpenAPIServed: ratelimitd serves the document at /api/v1/openapi.json
// (with or without a rules database), byte for byte the one in the
// repository, on GET and HEAD; other methods are 405.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil) // the bundled rules, no database
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	res, err := c.Get(p.URL(openapi.Path))
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	require.Equal(t, openapi.Document(), body)

	res, err = c.Head(p.URL(openapi.Path))
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)

	res, err = c.Post(p.URL(openapi.Path), "application/json", nil)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

// TestGeneratedClientSmoke: the client oapi-codegen generated from the
// document (package apiclient) drives a running ratelimitd on a rules
// database: it creates a rule (and reads the 409 of creating it again as
// the document's problem), checks under it until denied, and reads the
// rule's creation in the audit, with the request id it sent.
func TestGeneratedClientSmoke(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	token, _, err := db.CreateToken(ctx, "cli:test", "smoke-bot", rulesdb.ScopeWrite)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	p := startServer(t, nil, "--db", dsn, "--db-poll", "50ms")
	c, err := apiclient.NewClientWithResponses(p.URL(""),
		apiclient.WithHTTPClient(apiClient(t, &http.Client{Timeout: 5 * time.Second})),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	require.NoError(t, err)

	id, pattern, reqID := "orders", "/api/orders/**", apiclient.RequestID("smoke-1")
	rule := apiclient.RuleInput{Id: &id, Dimension: "user", EndpointPattern: &pattern, Limit: 2, WindowSeconds: 3600,
		Algorithm: apiclient.RuleInputAlgorithmFixedWindow}
	created, err := c.CreateRuleWithResponse(ctx, &apiclient.CreateRuleParams{XRequestId: &reqID}, rule)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), string(created.Body))
	require.NotNil(t, created.JSON201)
	require.Equal(t, "orders", created.JSON201.Id)
	require.True(t, created.JSON201.Enabled)
	require.Equal(t, created.HTTPResponse.Header.Get("ETag"), created.JSON201.Etag)
	again, err := c.CreateRuleWithResponse(ctx, nil, rule)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, again.StatusCode(), string(again.Body))
	require.NotNil(t, again.ApplicationproblemJSON409)
	require.Equal(t, "id", (*again.ApplicationproblemJSON409.Errors)[0].Field)

	// The rule is in force once its creation is answered.
	endpoint := "/api/orders/7"
	for i := range 3 {
		res, err := c.DecideCheckWithResponse(ctx, nil, apiclient.CheckRequest{KeyType: "user", KeyValue: "alice", Endpoint: &endpoint})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		d := res.JSON200
		require.NotNil(t, d)
		require.Equal(t, i < 2, d.Allowed, "check %d", i+1)
		require.Equal(t, "orders", d.Rule)
		require.EqualValues(t, 2, d.Limit)
		require.NotNil(t, d.Remaining)
		require.EqualValues(t, max(1-i, 0), *d.Remaining)
	}

	target := "rule/orders"
	audit, err := c.GetAuditWithResponse(ctx, &apiclient.GetAuditParams{Target: &target})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, audit.StatusCode(), string(audit.Body))
	require.Len(t, audit.JSON200.Entries, 1)
	e := audit.JSON200.Entries[0]
	require.Equal(t, "rule.create", e.Action)
	require.Equal(t, "smoke-bot", e.Actor)
	require.Equal(t, "smoke-1", *e.RequestId)
	require.Equal(t, created.JSON201.Revision, e.Revision)
}
