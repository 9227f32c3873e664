package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

type apiReply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// adminCall sends one admin API request to p with token (none if "").
func adminCall(t *testing.T, c *http.Client, p instance, token, method, path, body string, hdr ...string) apiReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.URL(path), rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := apiReply{status: res.StatusCode, header: res.Header, raw: string(b)}
	if len(b) > 0 && b[0] == '{' {
		require.NoError(t, json.Unmarshal(b, &out.body), string(b))
	}
	return out
}

// `ratelimitd serve --db file:…` serves the admin API behind tokens: a rule
// created through it decides the check API's answers, its audit row names
// the token, and the check API stays open.
func TestServeAdminAPISQLite(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	writer, _, err := db.CreateToken(ctx, "cli:test", "deploy-bot", rulesdb.ScopeWrite)
	require.NoError(t, err)
	reader, _, err := db.CreateToken(ctx, "cli:test", "dashboard", rulesdb.ScopeRead)
	require.NoError(t, err)
	p := startServer(t, nil, "--db", dsn, "--db-poll", "50ms")
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})

	r := adminCall(t, c, p, "", "GET", "/api/v1/rules", "")
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	r = adminCall(t, c, p, reader, "POST", "/api/v1/rules", `{}`)
	require.Equal(t, http.StatusForbidden, r.status, r.raw)
	r = adminCall(t, c, p, writer, "POST", "/api/v1/rules", `{"id":"orders","dimension":"user","limit":0}`)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)

	r = adminCall(t, c, p, writer, "POST", "/api/v1/rules",
		`{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":2,"window_seconds":3600,"algorithm":"fixed_window"}`,
		"X-Request-Id", "deploy-42")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Equal(t, "deploy-42", r.header.Get("X-Request-Id"))
	require.NotEmpty(t, r.header.Get("RateLimit-Policy"), "the admin API is rate-limited per token")
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, c, p, "probe"+strconv.FormatInt(time.Now().UnixNano(), 10))
		return limit == 2
	}, 2*time.Second, 10*time.Millisecond, "the rule created through the API decides")
	for i := range 3 {
		_, ok := checkHTTP(t, c, p, "bob")
		require.Equal(t, i < 2, ok, "check %d", i+1)
	}
	r = adminCall(t, c, p, reader, "GET", "/api/v1/users/bob/limits", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	lim := r.body["limits"].([]any)[0].(map[string]any)
	require.Equal(t, "orders", lim["rule_id"])
	require.EqualValues(t, 2, lim["used"])
	require.Equal(t, "throttled", lim["state"])

	r = adminCall(t, c, p, reader, "GET", "/api/v1/audit?target=rule/orders", "")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	es := r.body["entries"].([]any)
	require.Len(t, es, 1)
	e := es[0].(map[string]any)
	require.Equal(t, "deploy-bot", e["actor"])
	require.Equal(t, "rule.create", e["action"])
	require.Equal(t, "deploy-42", e["request_id"])

	r = adminCall(t, c, p, reader, "GET", "/api/v1/audit/x", "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))

	require.NoError(t, p.Close(), p.Logs())
	require.NotContains(t, p.Logs(), writer, "a token is never logged")
}

// Without --db there is no admin API (the rules come from a file): its
// paths answer a 404 problem that names --db.
func TestServeNoAdminAPIWithoutDB(t *testing.T) {
	t.Parallel()
	p := startServer(t, nil)
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})
	r := adminCall(t, c, p, "x", "GET", "/api/v1/rules", "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.raw)
	require.Contains(t, r.raw, "--db", "the problem says what serves the admin API")
}

// Two instances on PostgreSQL: a rule changed through instance A's admin
// API is in force on instance B within 1 s, over 100 changes (figures
// logged); an override set through A blocks on B.
func TestServeAdminAPIPostgresPropagation(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	ctx := dbctx(t)
	dsn := pg.NewDatabase(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	// Two tokens: 101 writes are over one token's 100 per minute.
	var tokens []string
	for _, name := range []string{"ops-1", "ops-2"} {
		s, _, err := db.CreateToken(ctx, "cli:test", name, rulesdb.ScopeWrite)
		require.NoError(t, err)
		tokens = append(tokens, s)
	}
	a := startServer(t, nil, "--db", dsn)
	b := startServer(t, nil, "--db", dsn)
	c := apiClient(t, &http.Client{Timeout: 5 * time.Second})

	r := adminCall(t, c, a, tokens[0], "POST", "/api/v1/rules",
		`{"id":"orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":100,"window_seconds":3600,"algorithm":"fixed_window"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	etag := r.header.Get("ETag")
	require.Eventually(t, func() bool {
		limit, _ := checkHTTP(t, c, b, "warmup"+strconv.FormatInt(time.Now().UnixNano(), 10))
		return limit == 100
	}, 2*time.Second, 5*time.Millisecond)

	const changes = 100
	took := make([]time.Duration, 0, changes)
	for i := range changes {
		limit := int64(200 + i)
		r := adminCall(t, c, a, tokens[i%2], "PUT", "/api/v1/rules/orders",
			fmt.Sprintf(`{"dimension":"user","endpoint_pattern":"/api/orders/**","limit":%d,"window_seconds":3600,"algorithm":"fixed_window"}`, limit),
			"If-Match", etag)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		start := time.Now() // the PUT has been answered: committed
		etag = r.header.Get("ETag")
		for n := 0; ; n++ {
			got, _ := checkHTTP(t, c, b, "u"+strconv.Itoa(i)+"-"+strconv.Itoa(n))
			if got == limit {
				break
			}
			require.Less(t, time.Since(start), time.Second, "change %d not in force on B within 1 s", i)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("propagation over %d changes through the admin API, two ratelimitd on PostgreSQL (PUT answered on A to the first check on B decided under the new limit): p50 %v, p90 %v, max %v",
		changes, took[changes/2], took[changes*9/10], took[changes-1])

	r = adminCall(t, c, a, tokens[0], "POST", "/api/v1/users/mallory/override", `{"rule_id":"orders","block":true,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	require.Eventually(t, func() bool {
		_, ok := checkHTTP(t, c, b, "mallory")
		return !ok
	}, time.Second, 5*time.Millisecond, "the block set through A is in force on B")
	_, ok := checkHTTP(t, c, b, "trent")
	require.True(t, ok)
}
