package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// proxied returns a TCP proxy to the PostgreSQL server of dsn and the DSN
// that reaches it through the proxy: the test can black-hole it.
func proxied(t *testing.T, dsn string) (*redistest.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p := redistest.NewProxy(t, u.Host)
	u.Host = p.Addr
	return p, u.String()
}

// reply is one answer, safe to collect from any goroutine.
type reply struct {
	status int
	ctype  string
	body   string
	took   time.Duration
	err    error
}

// try sends one request to p and times its answer.
func try(c *http.Client, p instance, token, method, path, body string, hdr ...string) reply {
	start := time.Now()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.URL(path), rd)
	if err != nil {
		return reply{err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b), took: time.Since(start), err: err}
}

// burst sends n checks of caller id on endpoint to p at once (HTTP check
// API) and returns how many were allowed and the rule each answer named.
func burst(t *testing.T, c *http.Client, p instance, id, endpoint string, n int) (allowed int, rules []string) {
	t.Helper()
	type answer struct {
		Allowed bool   `json:"allowed"`
		RuleID  string `json:"rule"`
	}
	answers := make([]answer, n)
	errs := make([]error, n)
	body := fmt.Sprintf(`{"key_type":"user","key_value":%q,"endpoint":%q}`, id, endpoint)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := c.Post(p.URL("/api/v1/rate-limit/check"), "application/json", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("check: status %d", resp.StatusCode)
				return
			}
			errs[i] = json.NewDecoder(resp.Body).Decode(&answers[i])
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		if answers[i].Allowed {
			allowed++
		}
		rules = append(rules, answers[i].RuleID)
	}
	return allowed, rules
}

// driverText are fragments of database and network errors that must never
// reach a client.
var driverText = []string{"pgx", "pgconn", "context deadline", "timeout:", "i/o", "dial", "127.0.0.1", "sql:", "postgres", "rulesdb"}

// unavailableWithin asserts that r is the generic 503 problem of a
// database that does not answer, within bound.
func unavailableWithin(t *testing.T, what string, r reply, bound time.Duration) {
	t.Helper()
	require.NoError(t, r.err, what)
	require.Less(t, r.took, bound, "%s: answered after %s", what, r.took)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", what, r.body)
	for _, s := range driverText {
		require.NotContains(t, strings.ToLower(r.body), s, "%s: the database's error reached the client", what)
	}
}

// TestServeDBPartitionAnswersWithinTheBound: instance B reaches PostgreSQL
// through a proxy that black-holes every connection at once (bytes stop,
// nothing is closed: no FIN, no RST). With --db-timeout 1s every admin
// request to B (writes in flight when it starts, a PUT, a POST with and
// without an Idempotency-Key, the list, the audit, a token never seen
// before, the admin page, gRPC's ResetLimit) is answered within the bound
// and some slack: 503 application/problem+json (the page: a 503 page) with
// no driver text; the checks keep deciding under the rules in force. After
// the partition heals (the held bytes delivered), every write is whole or
// absent: each revision has exactly one audit row, a rule exists exactly
// when its create's audit row does, and the requests sent during the
// partition wrote nothing.
func TestServeDBPartitionAnswersWithinTheBound(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	ctx := dbctx(t)
	dsn := pg.NewDatabase(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Create(ctx, "setup", rulesdb.Rule{ID: "part", Name: "part", Dimension: "user", EndpointPattern: "/part/**",
		Limit: 2, WindowSeconds: 60, Algorithm: "fixed_window", Enabled: true})
	require.NoError(t, err)
	token, _, err := db.CreateToken(ctx, "cli:test", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	fresh, _, err := db.CreateToken(ctx, "cli:test", "fresh", rulesdb.ScopeWrite)
	require.NoError(t, err)
	proxy, bDSN := proxied(t, dsn)
	const timeout = time.Second
	bound := timeout + 1500*time.Millisecond
	b := startServer(t, nil, "--db", bDSN, "--db-poll", "1h", "--db-timeout", timeout.String())
	c := apiClient(t, &http.Client{Timeout: 30 * time.Second})
	require.Equal(t, http.StatusOK, try(c, b, token, "GET", "/api/v1/rules", "").status, "warm: the token is cached")
	pc := pageClient(t)
	pc.Timeout = 30 * time.Second
	resp, _ := page(t, pc, http.MethodPost, b.URL("/admin/login"), url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	// Writers in flight when the partition starts.
	stop := make(chan struct{})
	var mu sync.Mutex
	created := map[string]reply{}
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				r := try(c, b, token, "POST", "/api/v1/rules", fmt.Sprintf(
					`{"id":%q,"dimension":"user","endpoint_pattern":"/w/%s/**","limit":5,"window_seconds":60,"algorithm":"fixed_window"}`, id, id))
				mu.Lock()
				created[id] = r
				mu.Unlock()
			}
		})
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(created) >= 8
	}, 10*time.Second, 5*time.Millisecond)
	proxy.Stall()
	partitioned := time.Now()

	during := map[string]reply{}
	var reqs sync.WaitGroup
	add := func(name string, f func() reply) {
		reqs.Go(func() {
			r := f()
			mu.Lock()
			during[name] = r
			mu.Unlock()
		})
	}
	add("PUT", func() reply {
		return try(c, b, token, "PUT", "/api/v1/rules/part", `{"dimension":"user","endpoint_pattern":"/part/**","limit":9,"window_seconds":60,"algorithm":"fixed_window"}`, "If-Match", "*")
	})
	add("POST", func() reply {
		return try(c, b, token, "POST", "/api/v1/rules", `{"id":"during","dimension":"user","endpoint_pattern":"/during/**","limit":1,"window_seconds":60,"algorithm":"fixed_window"}`)
	})
	add("POST with Idempotency-Key", func() reply {
		return try(c, b, token, "POST", "/api/v1/users/u1/override", `{"rule_id":"part","block":true,"ttl_seconds":60}`, "Idempotency-Key", "k1")
	})
	add("GET list", func() reply { return try(c, b, token, "GET", "/api/v1/rules", "") })
	add("GET audit", func() reply { return try(c, b, token, "GET", "/api/v1/audit", "") })
	add("a token not in the cache", func() reply { return try(c, b, fresh, "GET", "/api/v1/rules", "") })
	add("admin page", func() reply {
		start := time.Now()
		resp, body := pageNoFatal(pc, b.URL("/admin/"))
		return reply{status: resp, body: body, took: time.Since(start)}
	})
	var grpcErr error
	var grpcTook time.Duration
	rl := ratelimitv1.NewRateLimitServiceClient(b.Conn(t))
	reqs.Go(func() {
		start := time.Now()
		gctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, grpcErr = rl.ResetLimit(gctx,
			&ratelimitv1.ResetRequest{Dimension: "user", Identifier: "u2", Endpoint: "/part/x"},
			grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(fresh)))
		grpcTook = time.Since(start)
	})
	// The checks decide under the rules in force, at once.
	start := time.Now()
	allowed, _ := burst(t, c, b, "k1", "/part/x", 3)
	require.Equal(t, 2, allowed, "the rule in force (2/min) decides during the partition")
	require.Less(t, time.Since(start), time.Second, "checks never wait on the database")
	reqs.Wait()
	close(stop)
	writers.Wait()
	inFlight := time.Since(partitioned)

	for name, r := range during {
		if name == "admin page" {
			require.Less(t, r.took, bound, "admin page: answered after %s", r.took)
			require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
			require.Contains(t, r.body, "Service unavailable")
			continue
		}
		unavailableWithin(t, name, r, bound)
		require.Equal(t, "application/problem+json", r.ctype, name)
	}
	require.Equal(t, codes.Unavailable, status.Code(grpcErr), "ResetLimit with a token not in the cache: %v", grpcErr)
	require.Less(t, grpcTook, bound)
	require.Less(t, inFlight, bound+time.Second, "the writers in flight ended within the bound")
	mu.Lock()
	for id, r := range created {
		require.NoError(t, r.err, id)
		require.Less(t, r.took, bound, "%s: answered after %s", id, r.took)
		if r.status != http.StatusCreated {
			unavailableWithin(t, id, r, bound)
		}
	}
	mu.Unlock()

	t.Logf("partition phase took %s", time.Since(partitioned))
	proxy.Resume()
	healed := time.Now()
	require.Eventually(t, func() bool { return try(c, b, token, "GET", "/api/v1/rules", "").status == http.StatusOK },
		15*time.Second, 50*time.Millisecond, "B answers again after the partition heals")
	t.Logf("B answered again %s after the heal", time.Since(healed))
	wholeOrAbsent(t, db, created)
	for _, id := range []string{"during", "u1"} {
		es, _, err := db.AuditQuery(ctx, rulesdb.AuditFilter{Target: "rule/" + id})
		require.NoError(t, err)
		require.Empty(t, es, "a write sent during the partition wrote nothing")
	}
	got, err := db.Get(ctx, "part")
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Limit, "the PUT sent during the partition wrote nothing")
	require.NotContains(t, b.Logs(), "panic")
}

// wholeOrAbsent checks the database after writes cut by a partition: one
// audit row per revision, and each create is there with its one audit row
// or not at all (there when it was answered 201).
func wholeOrAbsent(t *testing.T, db *rulesdb.DB, created map[string]reply) {
	t.Helper()
	ctx := dbctx(t)
	rev, err := db.Revision(ctx)
	require.NoError(t, err)
	var rows []rulesdb.AuditEntry
	for cursor := ""; ; {
		page, next, err := db.AuditQuery(ctx, rulesdb.AuditFilter{Cursor: cursor, Limit: rulesdb.MaxPage})
		require.NoError(t, err)
		rows = append(rows, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, rows, int(rev), "every revision has exactly one audit row")
	audited := map[string]int{}
	for _, e := range rows {
		audited[e.Target]++
	}
	whole, absent := 0, 0
	for id, r := range created {
		_, err := db.Get(ctx, id)
		exists := err == nil
		if !exists {
			require.ErrorIs(t, err, rulesdb.ErrNotFound)
		}
		require.Equal(t, exists, audited["rule/"+id] == 1, "%s: the rule and its audit row, both or neither", id)
		require.LessOrEqual(t, audited["rule/"+id], 1, id)
		if r.status == http.StatusCreated {
			require.True(t, exists, "%s was answered 201", id)
		}
		if exists {
			whole++
		} else {
			absent++
		}
	}
	t.Logf("%d creates: %d whole, %d absent", len(created), whole, absent)
}

// pageNoFatal GETs u with the page client; safe off the test goroutine.
func pageNoFatal(c *http.Client, u string) (int, string) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeDBListenerPartition: instance B reaches PostgreSQL through a
// proxy; it polls once an hour, so only NOTIFY can bring it a change in
// time. The network is black-holed, then heals as after a long partition
// (the server's side of every connection gone, B's side open and silent:
// a listener that waits without probing would wait forever). B's listener
// is reported down (/readyz, ratelimitd_rules_listener_up) during the
// partition, up after it with one more reconnect; B catches up on the
// change made meanwhile, and the next change on instance A reaches B by
// NOTIFY within a second.
func TestServeDBListenerPartition(t *testing.T) {
	// Not parallel: it holds the service to a bound in time, measured
	// with no other test of the package running.
	ctx := dbctx(t)
	dsn := pg.NewDatabase(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	token, _, err := db.CreateToken(ctx, "cli:test", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	_, err = db.Create(ctx, "setup", ordersRule(100))
	require.NoError(t, err)
	proxy, bDSN := proxied(t, dsn)
	a := startServer(t, nil, "--db", dsn, "--db-poll", "1h")
	b := startServer(t, nil, "--db", bDSN, "--db-poll", "1h", "--db-timeout", "500ms")
	c := apiClient(t, &http.Client{Timeout: 10 * time.Second})
	listener := func() (string, float64, int64) {
		_, r := readyz(t, b)
		var n int64
		if r.ListenerReconnects != nil {
			n = *r.ListenerReconnects
		}
		return r.Listener, metric(t, b, "ratelimitd_rules_listener_up"), n
	}
	change := func(limit int64) {
		t.Helper()
		r := try(c, a, token, "PUT", "/api/v1/rules/orders", fmt.Sprintf(
			`{"dimension":"user","endpoint_pattern":"/api/orders/**","limit":%d,"window_seconds":3600,"algorithm":"fixed_window"}`, limit), "If-Match", "*")
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.status, r.body)
	}
	inForceOnB := func(limit int64, within time.Duration, what string) time.Duration {
		t.Helper()
		start := time.Now()
		require.Eventually(t, func() bool {
			got, _ := checkHTTP(t, c, b, fmt.Sprintf("probe-%d", time.Now().UnixNano()))
			return got == limit
		}, within, 10*time.Millisecond, "%s: limit %d not in force on B within %s", what, limit, within)
		return time.Since(start)
	}

	require.Eventually(t, func() bool { state, up, _ := listener(); return state == "up" && up == 1 },
		10*time.Second, 20*time.Millisecond, "B's listener up")
	_, _, before := listener()
	change(101)
	inForceOnB(101, time.Second, "before the partition")

	proxy.Stall()
	stalled := time.Now()
	require.Eventually(t, func() bool { state, up, _ := listener(); return state == "down" && up == 0 },
		5*time.Second, 20*time.Millisecond, "B's listener down during the partition")
	t.Logf("listener reported down %s into the partition", time.Since(stalled))
	_, r := readyz(t, b)
	require.NotNil(t, r.ListenerSince)
	require.False(t, r.ListenerSince.Before(stalled), "down since the partition: %v", r.ListenerSince)
	require.True(t, r.Ready, "the listener does not make B unready: checks are decided as before")
	change(102)

	proxy.Sever()
	healed := time.Now()
	require.Eventually(t, func() bool { state, up, _ := listener(); return state == "up" && up == 1 },
		10*time.Second, 20*time.Millisecond, "B's listener up after the partition")
	t.Logf("listener up again %s after the heal", time.Since(healed))
	_, _, after := listener()
	require.Equal(t, before+1, after, "one more reconnect (/readyz)")
	require.EqualValues(t, after, metric(t, b, "ratelimitd_rules_listener_reconnects_total"))
	inForceOnB(102, 2*time.Second, "the change made during the partition (the full reload after the reconnect)")
	change(103)
	t.Logf("a change after the heal reached B in %s", inForceOnB(103, time.Second, "after the heal, by NOTIFY"))
}
