package main

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/openapi"
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
