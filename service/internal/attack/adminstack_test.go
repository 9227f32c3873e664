package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// adminStack is the admin API, the check API and the engine following a
// rules database, over one store, served on loopback: what serve --db
// mounts.
type adminStack struct {
	t      *testing.T
	ctx    context.Context
	db     *rulesdb.DB
	eng    *engine.Engine
	store  core.Store
	srv    *httptest.Server
	tokens map[string]string // name -> secret
}

// startAdminStack opens dsn (a fresh SQLite file when ""), creates a
// write token for each of writers, and serves the stack with o's admin
// limits over store.
func startAdminStack(t *testing.T, dsn string, store core.Store, o adminauth.Options, writers ...string) *adminStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if dsn == "" {
		dsn = "file:" + filepath.Join(t.TempDir(), "rules.db")
	}
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	quiet := slog.New(slog.DiscardHandler)
	e, err := engine.New(ctx, store, db.Source(10*time.Millisecond), engine.WithLogger(quiet))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	tokens := map[string]string{}
	for _, name := range writers {
		secret, _, err := db.CreateToken(ctx, "cli:test", name, rulesdb.ScopeWrite)
		require.NoError(t, err)
		tokens[name] = secret
	}
	o.Logger = quiet
	auth, err := adminauth.New(db, store, o)
	require.NoError(t, err)
	api, err := adminapi.New(adminapi.Options{DB: db, Engine: e, Auth: auth, Logger: quiet})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for _, p := range adminapi.Paths() {
		mux.Handle(p, api)
	}
	mux.Handle(httpapi.Path, httpapi.New(e))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &adminStack{t: t, ctx: ctx, db: db, eng: e, store: store, srv: srv, tokens: tokens}
}

// do sends method path with body (JSON-encoded unless a []byte or nil) as
// token's bearer, and returns the status, headers and body.
func (s *adminStack) do(token, method, path string, body any, hdr ...string) (int, http.Header, []byte) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(s.t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(s.ctx, method, s.srv.URL+path, rd)
	require.NoError(s.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+s.tokens[token])
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, resp.Header, b
}

// waitRevision waits (at most 5 s) until the engine serves the database's
// current revision.
func (s *adminStack) waitRevision() {
	s.t.Helper()
	rev, err := s.db.Revision(s.ctx)
	require.NoError(s.t, err)
	want := formatRev(rev)
	require.Eventually(s.t, func() bool { return s.eng.Snapshot().Revision() == want }, 5*time.Second, 5*time.Millisecond)
}

func formatRev(rev int64) string { return strconv.FormatInt(rev, 10) }
