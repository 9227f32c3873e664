package adminui

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// stack is the admin page's real handler stack over a SQLite file: the
// rules database, an engine following it (polling every 20 ms) on the
// memory store, adminauth and the page, served on a loopback port.
type stack struct {
	t      *testing.T
	dsn    string
	db     *rulesdb.DB
	eng    *engine.Engine
	recent *engine.Recent
	rec    *traffic.Recorder
	h      *handler
	srv    *httptest.Server
	write  string // a write-scope token (name "alice")
	read   string // a read-scope token (name "bob")
}

func newStack(t *testing.T) *stack {
	t.Helper()
	// No authentication cache: a revocation is seen at the next request.
	return newStackWith(t, adminauth.Options{CacheTTL: -1})
}

// newStackWith is newStack with ao as adminauth's options.
func newStackWith(t *testing.T, ao adminauth.Options) *stack {
	t.Helper()
	return newStackOn(t, "file:"+filepath.Join(t.TempDir(), "rules.db"), ao)
}

// pg is one PostgreSQL server for this test binary; every test that runs
// on PostgreSQL gets a fresh database of its own on it.
var pg *pgtest.Shared

func TestMain(m *testing.M) {
	pg = pgtest.StartShared()
	code := m.Run()
	pg.Close()
	os.Exit(code)
}

// onEachDB runs f as a subtest on a stack over a SQLite file and over a
// real PostgreSQL database, the two at once (one waits on the PostgreSQL
// server while the other runs).
func onEachDB(t *testing.T, f func(t *testing.T, s *stack)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); f(t, newStack(t)) })
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, newStackOn(t, pg.NewDatabase(t), adminauth.Options{CacheTTL: -1}))
	})
}

// newStackOn is the stack over the database dsn.
func newStackOn(t *testing.T, dsn string, ao adminauth.Options) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	_, err = db.Create(ctx, "setup", rulesdb.Rule{ID: "orders", Name: "Orders", Dimension: "user", EndpointPattern: "/api/orders/**",
		Limit: 10, WindowSeconds: 60, Algorithm: "fixed_window", Enabled: true})
	require.NoError(t, err)
	s := &stack{t: t, dsn: dsn, db: db}
	s.write, _, err = db.CreateToken(ctx, "setup", "alice", rulesdb.ScopeWrite)
	require.NoError(t, err)
	s.read, _, err = db.CreateToken(ctx, "setup", "bob", rulesdb.ScopeRead)
	require.NoError(t, err)
	store, err := memorystore.New()
	require.NoError(t, err)
	s.recent = engine.NewRecent(5*time.Minute, 5000)
	s.rec = traffic.NewRecorder()
	src := db.Source(20 * time.Millisecond)
	s.eng, err = engine.New(ctx, store, src, engine.WithObserver(s.recent), engine.WithObserver(s.rec),
		engine.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.eng.Run(ctx) }()
	auth, err := adminauth.New(db, store, ao)
	require.NoError(t, err)
	hd, err := New(Options{DB: db, Engine: s.eng, Auth: auth, Recent: s.recent, Traffic: s.rec, Sync: src})
	require.NoError(t, err)
	s.h = hd.(*handler)
	mux := http.NewServeMux()
	mux.Handle("/admin/", hd)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		s.srv.Close()
		cancel()
		<-done
		_ = db.Close()
	})
	return s
}

// client is a browser without JavaScript: a cookie jar, no redirects
// followed unless asked.
type client struct {
	s  *stack
	c  *http.Client
	jr *cookiejar.Jar
}

func (s *stack) client() *client {
	jar, err := cookiejar.New(nil)
	require.NoError(s.t, err)
	return &client{s: s, jr: jar, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(method, path string, form url.Values, hdr ...string) resp {
	c.s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.s.srv.URL+path, body)
	require.NoError(c.s.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.c.Do(req)
	require.NoError(c.s.t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.s.t, err)
	return resp{status: res.StatusCode, header: res.Header, body: string(b)}
}

func (c *client) get(path string) resp { return c.do(http.MethodGet, path, nil) }

func (c *client) post(path string, form url.Values) resp { return c.do(http.MethodPost, path, form) }

// login signs in with token and requires success.
func (c *client) login(token string) {
	c.s.t.Helper()
	r := c.post("/admin/login", url.Values{"token": {token}})
	require.Equal(c.s.t, http.StatusSeeOther, r.status, r.body)
	require.Equal(c.s.t, "/admin/", r.header.Get("Location"))
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	require.NotNil(t, m, "no csrf field in the page")
	return m[1]
}

var etagRe = regexp.MustCompile(`name="etag" value="([^"]+)"`)

// ruleForm returns the form of the rule page with its hidden fields.
func ruleForm(t *testing.T, page string) url.Values {
	t.Helper()
	m := etagRe.FindStringSubmatch(page)
	require.NotNil(t, m, "no etag field in the page")
	return url.Values{"csrf": {csrf(t, page)}, "etag": {html.UnescapeString(m[1])}, "name": {"Orders"}, "endpoint_pattern": {"/api/orders/**"},
		"tier": {""}, "limit": {"10"}, "window_seconds": {"60"}, "algorithm": {"fixed_window"}, "burst": {"0"}, "enabled": {"on"}}
}
