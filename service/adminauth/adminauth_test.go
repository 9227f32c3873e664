package adminauth_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// fixture is an admin server on loopback: a rules database in a real
// SQLite file, the memory store, a write and a read token, and a small
// handler that writes rules through the database.
type fixture struct {
	db           *rulesdb.DB
	url          string
	write, read  string
	release      chan struct{} // POST /block waits for it
	blocked      chan struct{} // POST /block signals it has started
	fails        atomic.Int32  // POST /flaky answers 500 while > 0
	handlerCalls atomic.Int32
	logs         *syncBuffer
	auth         *adminauth.Auth
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newFixture(t *testing.T, dsn string, o adminauth.Options) *fixture {
	t.Helper()
	ctx := tctx(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	f := &fixture{db: db, release: make(chan struct{}), blocked: make(chan struct{}, 16), logs: &syncBuffer{}}
	f.write, _, err = db.CreateToken(ctx, "test", "deployer", rulesdb.ScopeWrite)
	require.NoError(t, err)
	f.read, _, err = db.CreateToken(ctx, "test", "viewer", rulesdb.ScopeRead)
	require.NoError(t, err)
	st, err := memorystore.New()
	require.NoError(t, err)
	o.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	f.auth, err = adminauth.New(db, st, o)
	require.NoError(t, err)
	srv := httptest.NewServer(f.auth.Wrap(f.handler()))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fixture) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /things", func(w http.ResponseWriter, r *http.Request) {
		p, ok := adminauth.PrincipalFrom(r.Context())
		if !ok {
			http.Error(w, "no principal", 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"name": p.Name, "scope": string(p.Scope), "request_id": rulesdb.RequestID(r.Context())})
	})
	mux.HandleFunc("POST /rules", func(w http.ResponseWriter, r *http.Request) {
		f.handlerCalls.Add(1)
		p, _ := adminauth.PrincipalFrom(r.Context())
		var rule rulesdb.Rule
		if err := json.NewDecoder(r.Body).Decode(&rule); err != nil {
			http.Error(w, "bad json", 400)
			return
		}
		out, err := f.db.Create(r.Context(), p.Name, rule)
		switch {
		case errors.Is(err, rulesdb.ErrInvalid), errors.Is(err, rulesdb.ErrExists):
			http.Error(w, err.Error(), 400)
			return
		case err != nil:
			http.Error(w, "internal", 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", out.ETag)
		w.Header().Set("Location", "/rules/"+out.ID)
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /block", func(w http.ResponseWriter, r *http.Request) {
		f.handlerCalls.Add(1)
		f.blocked <- struct{}{}
		<-f.release
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "made\n")
	})
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		f.handlerCalls.Add(1)
		if f.fails.Add(-1) >= 0 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/noop", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

type response struct {
	status int
	header http.Header
	body   string
}

// do sends one request; hdr is name, value pairs (Authorization given as
// is, so tests can send odd ones).
func do(t *testing.T, method, url, body string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(tctx(t), method, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{res.StatusCode, res.Header, string(b)}
}

// rawPost writes a POST with the Authorization header auth byte for byte
// and returns the response's status.
func rawPost(t *testing.T, base, path, auth, body string, extra ...string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	var more string
	for _, h := range extra {
		more += h + "\r\n"
	}
	_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, auth, more, len(body), body)
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	return res.StatusCode
}

func bearer(secret string) []string { return []string{"Authorization", "Bearer " + secret} }

const ruleJSON = `{"id":"orders","name":"orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":100,"window_seconds":60,"algorithm":"gcra","enabled":true}`

func TestScopes(t *testing.T) { each(t, testScopes) }

func testScopes(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	ctx := tctx(t)

	r := do(t, "GET", f.url+"/things", "", bearer(f.read)...)
	require.Equal(t, 200, r.status, r.body)
	require.Contains(t, r.body, `"name":"viewer"`)
	require.Contains(t, r.body, `"scope":"read"`)
	require.Len(t, r.header.Get("X-Request-Id"), 32, "generated")
	require.Contains(t, r.body, r.header.Get("X-Request-Id"))

	// A read token cannot write: 403, and nothing changes.
	rev0, err := f.db.Revision(ctx)
	require.NoError(t, err)
	r = do(t, "POST", f.url+"/rules", ruleJSON, bearer(f.read)...)
	require.Equal(t, 403, r.status)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	require.Contains(t, r.body, `"status":403`)
	require.Contains(t, r.body, "scope")
	require.Zero(t, f.handlerCalls.Load())
	rev, err := f.db.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, rev0, rev)
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		require.Equal(t, 403, do(t, m, f.url+"/noop", "", bearer(f.read)...).status, m)
	}
	require.Equal(t, 204, do(t, "HEAD", f.url+"/noop", "", bearer(f.read)...).status)

	// A write token reads and writes; the audit row names the token and
	// carries the request id the client sent.
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.write)...).status)
	r = do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), "X-Request-Id", "client-req:42")...)
	require.Equal(t, 201, r.status, r.body)
	require.Equal(t, "client-req:42", r.header.Get("X-Request-Id"))
	es, err := f.db.Audit(ctx, rev, 10)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "deployer", es[0].Actor)
	require.Equal(t, "rule.create", es[0].Action)
	require.Equal(t, "client-req:42", es[0].RequestID)

	// An insane request id is replaced, not echoed.
	r = do(t, "GET", f.url+"/things", "", append(bearer(f.read), "X-Request-Id", "a b<script>")...)
	require.Equal(t, 200, r.status)
	require.Len(t, r.header.Get("X-Request-Id"), 32)
}

func TestUnauthorized(t *testing.T) { each(t, testUnauthorized) }

func testUnauthorized(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{CacheTTL: -1})
	ctx := tctx(t)
	revoked, _, err := f.db.CreateToken(ctx, "test", "old", rulesdb.ScopeWrite)
	require.NoError(t, err)
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(revoked)...).status)
	require.NoError(t, f.db.RevokeToken(ctx, "test", "old"))
	unknown := "slk_" + strings.Repeat("x", 43)

	cases := map[string][]string{
		"no header":      nil,
		"basic scheme":   {"Authorization", "Basic ZGVwbG95ZXI6cHc="},
		"no credentials": {"Authorization", "Bearer"},
		"bare token":     {"Authorization", f.write},
		"unknown":        bearer(unknown),
		"revoked":        bearer(revoked),
		"hash-like":      bearer(strings.Repeat("ab", 32)),
	}
	bodies := map[string]string{}
	for name, hdr := range cases {
		for _, m := range []string{"GET", "POST"} {
			r := do(t, m, f.url+"/things", "", hdr...)
			require.Equal(t, 401, r.status, name)
			require.True(t, strings.HasPrefix(r.header.Get("WWW-Authenticate"), `Bearer realm="ratelimitd"`), name)
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), name)
			require.Empty(t, r.header.Get("RateLimit"), "no token, no limit headers")
			bodies[name] = r.body
		}
	}
	// Unknown and revoked tokens are answered alike.
	require.Equal(t, bodies["unknown"], bodies["revoked"])
	require.NotContains(t, bodies["revoked"], "revoked")
	require.NotContains(t, bodies["revoked"], "old")
	require.Zero(t, f.handlerCalls.Load())
	require.Equal(t, `Bearer realm="ratelimitd", error="invalid_token"`, do(t, "GET", f.url+"/things", "", bearer(revoked)...).header.Get("WWW-Authenticate"))
	require.Equal(t, `Bearer realm="ratelimitd"`, do(t, "GET", f.url+"/things", "").header.Get("WWW-Authenticate"))
}

func TestRevocationCache(t *testing.T) { each(t, testRevocationCache) }

func testRevocationCache(t *testing.T, dsn string) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFixture(t, dsn, adminauth.Options{Now: clock})
	ctx := tctx(t)
	p, err := f.auth.Authenticate(ctx, f.write)
	require.NoError(t, err)
	require.Equal(t, adminauth.Principal{Name: "deployer", Scope: rulesdb.ScopeWrite}, p)
	require.NoError(t, f.db.RevokeToken(ctx, "test", "deployer"))
	// Cached: still accepted within the TTL, refused after it.
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.write)...).status)
	mu.Lock()
	now = now.Add(adminauth.DefaultCacheTTL)
	mu.Unlock()
	require.Equal(t, 401, do(t, "GET", f.url+"/things", "", bearer(f.write)...).status)
	_, err = f.auth.Authenticate(ctx, f.write)
	require.ErrorIs(t, err, rulesdb.ErrUnauthorized)
}

func TestRateLimits(t *testing.T) { each(t, testRateLimits) }

func testRateLimits(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	ctx := tctx(t)
	other, _, err := f.db.CreateToken(ctx, "test", "other", rulesdb.ScopeWrite)
	require.NoError(t, err)
	for i := range 100 {
		r := do(t, "POST", f.url+"/noop", "", bearer(f.write)...)
		require.Equal(t, 204, r.status, i)
		require.Equal(t, strconv.Itoa(99-i), r.header.Get("X-RateLimit-Remaining"), i)
	}
	r := do(t, "POST", f.url+"/noop", "", bearer(f.write)...)
	require.Equal(t, 429, r.status)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	// A sliding window counter whose 100 writes all fell just after a
	// minute began frees one only once that minute is over and a hundredth
	// of the next has passed: up to 60.6 s, 61 in whole seconds.
	require.True(t, ra >= 1 && ra <= 61, ra)
	require.Equal(t, `"admin_write";q=100;w=60`, r.header.Get("RateLimit-Policy"))
	require.Contains(t, r.header.Get("RateLimit"), `"admin_write";r=0;t=`)
	require.Equal(t, "100", r.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	require.NotEmpty(t, r.header.Get("X-RateLimit-Reset"))
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	require.Contains(t, r.body, "admin_write")
	// Other methods count as writes too.
	require.Equal(t, 429, do(t, "DELETE", f.url+"/noop", "", bearer(f.write)...).status)

	// Reads are counted apart, and other tokens have their own limits.
	r = do(t, "GET", f.url+"/things", "", bearer(f.write)...)
	require.Equal(t, 200, r.status)
	require.Equal(t, `"admin_read";q=1000;w=60`, r.header.Get("RateLimit-Policy"))
	require.Equal(t, "999", r.header.Get("X-RateLimit-Remaining"))
	require.Empty(t, r.header.Get("Retry-After"))
	r = do(t, "POST", f.url+"/noop", "", bearer(other)...)
	require.Equal(t, 204, r.status)
	require.Equal(t, "99", r.header.Get("X-RateLimit-Remaining"))
}

func TestRateLimitOptions(t *testing.T) { each(t, testRateLimitOptions) }

func testRateLimitOptions(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{ReadsPerMinute: 2, WritesPerMinute: 1})
	require.Equal(t, 204, do(t, "POST", f.url+"/noop", "", bearer(f.write)...).status)
	require.Equal(t, 429, do(t, "POST", f.url+"/noop", "", bearer(f.write)...).status)
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.read)...).status)
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.read)...).status)
	r := do(t, "GET", f.url+"/things", "", bearer(f.read)...)
	require.Equal(t, 429, r.status)
	require.Equal(t, `"admin_read";q=2;w=60`, r.header.Get("RateLimit-Policy"))

	_, err := adminauth.New(f.db, nil, adminauth.Options{})
	require.ErrorContains(t, err, "store")
	st, err := memorystore.New()
	require.NoError(t, err)
	_, err = adminauth.New(nil, st, adminauth.Options{})
	require.ErrorContains(t, err, "db")
	_, err = adminauth.New(f.db, st, adminauth.Options{WritesPerMinute: -1})
	require.ErrorContains(t, err, "WritesPerMinute")
}

// TestStoreFailureFailsClosed: the admin limits on a real Redis; Redis
// killed, requests are refused with 503 and no error text.
func TestStoreFailureFailsClosed(t *testing.T) {
	ctx := tctx(t)
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(t.TempDir(), "rules.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	secret, _, err := db.CreateToken(ctx, "test", "deployer", rulesdb.ScopeWrite)
	require.NoError(t, err)
	redis := redistest.StartServer(t)
	st, err := redisstore.New(redis.Client(t), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var logs syncBuffer
	a, err := adminauth.New(db, st, adminauth.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	var calls atomic.Int32
	srv := httptest.NewServer(a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })))
	t.Cleanup(srv.Close)

	r := do(t, "POST", srv.URL+"/x", "", bearer(secret)...)
	require.Equal(t, 200, r.status)
	require.Equal(t, "99", r.header.Get("X-RateLimit-Remaining"))
	redis.Kill()
	for _, m := range []string{"GET", "POST"} {
		r = do(t, m, srv.URL+"/x", "", bearer(secret)...)
		require.Equal(t, 503, r.status)
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		for _, leak := range []string{redis.Addr, "refused", "dial", "redis", "EOF", "connection"} {
			require.NotContains(t, r.body, leak)
		}
	}
	require.EqualValues(t, 1, calls.Load())
	require.Contains(t, logs.String(), "fail closed")
}

func TestIdempotencyKey(t *testing.T) { each(t, testIdempotencyKey) }

func testIdempotencyKey(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	ctx := tctx(t)
	key := []string{"Idempotency-Key", "create-orders-1"}

	first := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), key...)...)
	require.Equal(t, 201, first.status, first.body)
	require.Empty(t, first.header.Get("Idempotent-Replayed"))
	rev, err := f.db.Revision(ctx)
	require.NoError(t, err)

	// A replay: the same bytes and headers, marked; nothing is written.
	again := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), key...)...)
	require.Equal(t, 201, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body)
	for _, h := range []string{"Content-Type", "Etag", "Location"} {
		require.Equal(t, first.header.Get(h), again.header.Get(h), h)
	}
	require.NotEqual(t, first.header.Get("X-Request-Id"), again.header.Get("X-Request-Id"))
	require.EqualValues(t, 1, f.handlerCalls.Load())
	rev2, err := f.db.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, rev, rev2)

	// The same key with another body, or another path: 422.
	other := strings.Replace(ruleJSON, `"limit":100`, `"limit":200`, 1)
	r := do(t, "POST", f.url+"/rules", other, append(bearer(f.write), key...)...)
	require.Equal(t, 422, r.status)
	require.Contains(t, r.body, `"field":"Idempotency-Key"`)
	r = do(t, "POST", f.url+"/block", ruleJSON, append(bearer(f.write), key...)...)
	require.Equal(t, 422, r.status)
	// Keys belong to a token: another token's same key is its own.
	other2, _, err := f.db.CreateToken(ctx, "test", "other", rulesdb.ScopeWrite)
	require.NoError(t, err)
	r = do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(other2), key...)...)
	require.Equal(t, 400, r.status, "a second create of the same rule: the handler ran")
	require.Empty(t, r.header.Get("Idempotent-Replayed"))

	// A 4xx is stored and replayed like any answer.
	r2 := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(other2), key...)...)
	require.Equal(t, 400, r2.status)
	require.Equal(t, "true", r2.header.Get("Idempotent-Replayed"))
	require.Equal(t, r.body, r2.body)

	// Without the header, POSTs are not deduplicated.
	require.Equal(t, 400, do(t, "POST", f.url+"/rules", ruleJSON, bearer(f.write)...).status)
	require.EqualValues(t, 3, f.handlerCalls.Load())
}

func TestIdempotencyInFlightAndConcurrent(t *testing.T) {
	each(t, testIdempotencyInFlightAndConcurrent)
}

func testIdempotencyInFlightAndConcurrent(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	key := []string{"Idempotency-Key", "k-block"}
	done := make(chan response, 1)
	go func() { done <- do(t, "POST", f.url+"/block", "x", append(bearer(f.write), key...)...) }()
	select {
	case <-f.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	r := do(t, "POST", f.url+"/block", "x", append(bearer(f.write), key...)...)
	require.Equal(t, 409, r.status)
	require.Contains(t, r.body, "in flight")
	close(f.release)
	first := <-done
	require.Equal(t, 201, first.status)
	r = do(t, "POST", f.url+"/block", "x", append(bearer(f.write), key...)...)
	require.Equal(t, 201, r.status)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, f.handlerCalls.Load())

	// Concurrent duplicates of a write: exactly one write; the others are
	// replays or 409s.
	ctx := tctx(t)
	rev0, err := f.db.Revision(ctx)
	require.NoError(t, err)
	body := strings.Replace(ruleJSON, `"id":"orders"`, `"id":"conc"`, 1)
	var wg sync.WaitGroup
	codes := make(chan int, 16)
	for range 16 {
		wg.Go(func() {
			r := do(t, "POST", f.url+"/rules", body, append(bearer(f.write), "Idempotency-Key", "conc-1")...)
			codes <- r.status
		})
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	require.Equal(t, 16, n[201]+n[409], n)
	require.GreaterOrEqual(t, n[201], 1)
	rev, err := f.db.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, rev0+1, rev, "exactly one write")
	es, err := f.db.Audit(ctx, rev0, 100)
	require.NoError(t, err)
	require.Len(t, es, 1)
}

func TestIdempotency5xxReleasesKey(t *testing.T) { each(t, testIdempotency5xxReleasesKey) }

func testIdempotency5xxReleasesKey(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	f.fails.Store(1)
	key := []string{"Idempotency-Key", "k-flaky"}
	require.Equal(t, 503, do(t, "POST", f.url+"/flaky", "b", append(bearer(f.write), key...)...).status)
	r := do(t, "POST", f.url+"/flaky", "b", append(bearer(f.write), key...)...)
	require.Equal(t, 201, r.status, "the key was released: the retry ran")
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	r = do(t, "POST", f.url+"/flaky", "b", append(bearer(f.write), key...)...)
	require.Equal(t, 201, r.status)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, f.handlerCalls.Load())
}

// TestHostileInput: odd and huge Authorization headers, request ids and
// idempotency keys are refused cleanly, and nothing runs or changes.
func TestHostileInput(t *testing.T) { each(t, testHostileInput) }

func testHostileInput(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	ctx := tctx(t)
	rev0, err := f.db.Revision(ctx)
	require.NoError(t, err)
	for name, hdr := range map[string][]string{
		"huge":            bearer("slk_" + strings.Repeat("A", 64<<10)),
		"utf8":            bearer("slk_ÄÖÜ" + f.write[10:]),
		"two headers":     append(bearer(f.write), bearer(f.write)...),
		"comma list":      {"Authorization", "Bearer " + f.write + ", Bearer " + f.write},
		"token with tail": {"Authorization", "Bearer " + f.write + " extra"},
		"sql":             bearer("x' OR '1'='1"),
		"scheme only":     {"Authorization", "Bearer    "},
		"tab":             {"Authorization", "Bearer\t" + f.write},
	} {
		r := do(t, "POST", f.url+"/rules", ruleJSON, hdr...)
		require.Equal(t, 401, r.status, name)
	}
	// Bytes a client library refuses to send, written raw.
	for name, auth := range map[string]string{
		"nul":  "Bearer " + f.write[:10] + "\x00" + f.write[11:],
		"high": "Bearer " + f.write[:10] + "\xff\xfe" + f.write[12:],
		"ctl":  "Bearer " + f.write + "\x01",
	} {
		status := rawPost(t, f.url, "/rules", auth, ruleJSON)
		require.True(t, status == 400 || status == 401, "%s: %d", name, status)
	}
	// Lower-case scheme is allowed (schemes are case-insensitive).
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", "Authorization", "bearer "+f.read).status)

	for name, k := range map[string]string{
		"empty": "",
		"long":  strings.Repeat("k", 256),
		"utf8":  "clé",
	} {
		r := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), "Idempotency-Key", k)...)
		require.Equal(t, 400, r.status, name)
		require.Contains(t, r.body, "Idempotency-Key", name)
	}
	for name, k := range map[string]string{"control": "a\x01b", "del": "a\x7f", "nul": "a\x00", "high": "\xff"} {
		status := rawPost(t, f.url, "/rules", "Bearer "+f.write, ruleJSON, "Idempotency-Key: "+k)
		require.Equal(t, 400, status, name)
	}
	r := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), "Idempotency-Key", "a", "Idempotency-Key", "b")...)
	require.Equal(t, 400, r.status, "two keys")
	r = do(t, "POST", f.url+"/rules", strings.Repeat("x", adminauth.MaxIdempotentBody+1), append(bearer(f.write), "Idempotency-Key", "big")...)
	require.Equal(t, 413, r.status)
	require.Zero(t, f.handlerCalls.Load())
	rev, err := f.db.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, rev0, rev)

	// 255 printable characters, spaces included, are a valid key.
	long := strings.Repeat("~ a", 85)
	r = do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), "Idempotency-Key", long)...)
	require.Equal(t, 201, r.status, r.body)

	// A huge request id is replaced.
	r = do(t, "GET", f.url+"/things", "", append(bearer(f.read), "X-Request-Id", strings.Repeat("r", 129))...)
	require.Equal(t, 200, r.status)
	require.Len(t, r.header.Get("X-Request-Id"), 32)
	require.NotContains(t, f.logs.String(), f.write)
}

// TestDatabaseFailure: the database failing while a token is checked is
// 503 with no error text (logged instead); tokens already cached still
// pass, but an Idempotency-Key, which needs the database, is 503 and its
// handler never runs.
func TestDatabaseFailure(t *testing.T) { each(t, testDatabaseFailure) }

func testDatabaseFailure(t *testing.T, dsn string) {
	f := newFixture(t, dsn, adminauth.Options{})
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.read)...).status)
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.write)...).status)
	require.NoError(t, f.db.Close())
	unknown := "slk_" + strings.Repeat("z", 43)
	for _, m := range []string{"GET", "POST"} {
		r := do(t, m, f.url+"/things", "", bearer(unknown)...)
		require.Equal(t, 503, r.status, m)
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		for _, leak := range []string{"sql", "closed", "database", "rules.db", "postgres"} {
			require.NotContains(t, r.body, leak)
		}
	}
	require.Contains(t, f.logs.String(), "authenticating a token")
	require.Equal(t, 200, do(t, "GET", f.url+"/things", "", bearer(f.read)...).status, "cached")
	require.Equal(t, 204, do(t, "POST", f.url+"/noop", "", bearer(f.write)...).status, "cached")
	r := do(t, "POST", f.url+"/rules", ruleJSON, append(bearer(f.write), "Idempotency-Key", "k")...)
	require.Equal(t, 503, r.status)
	require.NotContains(t, r.body, "closed")
	require.Contains(t, f.logs.String(), "idempotency key")
	require.Zero(t, f.handlerCalls.Load())
}

func TestOptionsBounds(t *testing.T) {
	ctx := tctx(t)
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(t.TempDir(), "rules.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st, err := memorystore.New()
	require.NoError(t, err)
	_, err = adminauth.New(db, st, adminauth.Options{ReadsPerMinute: 1 << 20})
	require.NoError(t, err)
	_, err = adminauth.New(db, st, adminauth.Options{ReadsPerMinute: 1<<20 + 1})
	require.ErrorContains(t, err, "ReadsPerMinute")
	_, err = adminauth.New(db, st, adminauth.Options{WritesPerMinute: 1<<20 + 1})
	require.ErrorContains(t, err, "WritesPerMinute")
	_, err = adminauth.New(db, st, adminauth.Options{ReadsPerMinute: -1})
	require.ErrorContains(t, err, "ReadsPerMinute")
}
