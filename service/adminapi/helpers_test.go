package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// env is a served admin API on a real SQLite file, with the engine that
// follows it and the check API on the same server.
type env struct {
	api *api
	t   *testing.T
	// tokens maps an actor's name to its write-scoped token's secret
	// ("reader" has a read-scoped one).
	tokens map[string]string
	// base is the revision after the tokens were created: the tests'
	// writes are base+1, base+2, ...
	base int64
	ctx  context.Context
	dsn  string
	db   *rulesdb.DB
	eng  *engine.Engine
	srv  *httptest.Server
	logs *bytes.Buffer
}

// pg is one PostgreSQL server for this test binary; each test on it gets
// a fresh database.
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// onEach runs f as a subtest on a SQLite file and on PostgreSQL, the two
// at once (each on a database of its own; one waits on the PostgreSQL
// server while the other runs).
func onEach(t *testing.T, f func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, newEnv(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, newEnvOn(t, pg.NewDatabase(t))) })
}

// newEnv is an env on a fresh SQLite file.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, "file:"+filepath.Join(t.TempDir(), "rules.db"))
}

func newEnvOn(t *testing.T, dsn string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	src := db.Source(10 * time.Millisecond)
	e, err := engine.New(ctx, st, src, engine.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	logs := &bytes.Buffer{}
	tokens := map[string]string{}
	for _, name := range actors {
		scope := rulesdb.ScopeWrite
		if name == "reader" {
			scope = rulesdb.ScopeRead
		}
		secret, _, err := db.CreateToken(ctx, "cli:test", name, scope)
		require.NoError(t, err)
		tokens[name] = secret
	}
	base, err := db.Revision(ctx)
	require.NoError(t, err)
	auth, err := adminauth.New(db, st, adminauth.Options{ReadsPerMinute: 100000, WritesPerMinute: 100000,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	a, err := newAPI(Options{DB: db, Engine: e, Auth: auth, Logger: slog.New(slog.NewTextHandler(logs, nil)), Sync: src})
	require.NoError(t, err)
	h := auth.Wrap(a.routes())
	mux := http.NewServeMux()
	for _, p := range Paths() {
		mux.Handle(p, h)
	}
	mux.Handle(httpapi.Path, httpapi.New(e))
	// Every exchange of a test must match the OpenAPI document.
	srv := httptest.NewServer(openapitest.New(t).Handler(t, mux))
	t.Cleanup(srv.Close)
	return &env{api: a, tokens: tokens, base: base, t: t, ctx: ctx, dsn: dsn, db: db, eng: e, srv: srv, logs: logs}
}

// actors are the names of the tests' tokens.
var actors = []string{"alice", "ann", "ben", "cat", "seed", "reader"}

// auth is the Authorization header of actor's token.
func (e *env) auth(actor string) []string {
	return []string{"Authorization", "Bearer " + e.tokens[actor]}
}

// rev is the revision of the tests' n-th write; etag its etag.
func (e *env) rev(n int64) int64 { return e.base + n }

func (e *env) etag(n int64) string { return fmt.Sprintf(`"%d"`, e.base+n) }

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// field is the first field a problem names.
func (r reply) field() string {
	errs, _ := r.body["errors"].([]any)
	if len(errs) == 0 {
		return ""
	}
	f, _ := errs[0].(map[string]any)["field"].(string)
	return f
}

// req sends a request as actor alice with a JSON body (none if body is
// ""); hdr is pairs of header names and values.
func (e *env) req(method, path, body string, hdr ...string) reply {
	e.t.Helper()
	hdr = append([]string{"Authorization", "Bearer " + e.tokens["alice"]}, hdr...)
	if body != "" {
		hdr = append([]string{"Content-Type", "application/json"}, hdr...)
	}
	return e.raw(method, path, body, hdr...)
}

// raw sends a request with exactly the headers given.
func (e *env) raw(method, path, body string, hdr ...string) reply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	out := reply{status: res.StatusCode, header: res.Header, raw: string(b)}
	if len(b) > 0 && b[0] == '{' {
		require.NoError(e.t, json.Unmarshal(b, &out.body), string(b))
	}
	return out
}

func (e *env) revision() int64 {
	e.t.Helper()
	rev, err := e.db.Revision(e.ctx)
	require.NoError(e.t, err)
	return rev
}

// problem asserts r is a problem+json of status naming field.
func requireProblem(t *testing.T, r reply, status int, field string) {
	t.Helper()
	require.Equal(t, status, r.status, r.raw)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.raw)
	require.EqualValues(t, status, r.body["status"], r.raw)
	require.NotEmpty(t, r.body["title"], r.raw)
	require.NotEmpty(t, r.body["detail"], r.raw)
	require.Equal(t, "about:blank", r.body["type"], r.raw)
	require.NotEmpty(t, r.body["instance"], r.raw)
	if field != "" {
		require.Equal(t, field, r.field(), r.raw)
		require.Contains(t, r.body["detail"], field, r.raw)
	}
}

const ordersRule = `{"id":"orders","name":"Orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":5,"window_seconds":60,"algorithm":"fixed_window"}`

// eventually polls cond every 10 ms for up to 5 s.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 10*time.Millisecond, msg)
}

// rulesdbAll selects the whole audit log in one page.
func rulesdbAll() rulesdb.AuditFilter { return rulesdb.AuditFilter{Limit: rulesdb.MaxPage} }

// setNow sets the API's clock (override expiries).
func (e *env) setNow(t time.Time) { e.api.now = func() time.Time { return t } }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
