package main

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestServeDBReadYourWrites: on `ratelimitd serve --db` processes polling
// once an hour (so neither the poll nor, on SQLite, anything else can
// bring a change in time), every admin write is in force on the instance
// that answered it by the time it answers: the checks sent at once right
// after the answer, to the same instance, are decided under it. Create,
// update, a tier, an override, a block and its clear, deletes, the admin
// page's save, and 8 concurrent writers each checking its own new rule
// (on PostgreSQL through two instances).
func TestServeDBReadYourWrites(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testServeDBReadYourWrites(t, "file:"+filepath.Join(t.TempDir(), "rules.db"), 1)
	})
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testServeDBReadYourWrites(t, pg.NewDatabase(t), 2) })
}

func testServeDBReadYourWrites(t *testing.T, dsn string, instances int) {
	ctx := dbctx(t)
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	token, _, err := db.CreateToken(ctx, "cli:test", "deploy-bot", rulesdb.ScopeWrite)
	require.NoError(t, err)
	var ps []*ratelimitdtest.Daemon
	for range instances {
		ps = append(ps, startServer(t, nil, "--db", dsn, "--db-poll", "1h"))
	}
	p := ps[0]
	c := apiClient(t, &http.Client{Timeout: 10 * time.Second})
	call := func(method, path, body string, hdr ...string) apiReply {
		t.Helper()
		return adminCall(t, c, p, token, method, path, body, hdr...)
	}
	exactly := func(want int, id, endpoint string, n int, what string) {
		t.Helper()
		got, rules := burst(t, c, p, id, endpoint, n)
		require.Equal(t, want, got, "%s: %d checks at once right after the answer, allowed %d, want %d (rules %v)", what, n, got, want, rules)
	}

	r := call("POST", "/api/v1/rules", `{"id":"ryw","dimension":"user","endpoint_pattern":"/ryw/**","limit":2,"window_seconds":60,"algorithm":"fixed_window"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	exactly(2, "c1", "/ryw/a", 3, "created 2/min")

	r = call("PUT", "/api/v1/rules/ryw", `{"dimension":"user","endpoint_pattern":"/ryw/**","limit":1,"window_seconds":60,"algorithm":"fixed_window"}`,
		"If-Match", r.header.Get("ETag"))
	require.Equal(t, http.StatusOK, r.status, r.raw)
	exactly(1, "c2", "/ryw/a", 3, "lowered to 1/min")

	r = call("POST", "/api/v1/rules", `{"id":"ryw-gold","dimension":"user","endpoint_pattern":"/ryw/**","tier":"gold","limit":3,"window_seconds":60,"algorithm":"fixed_window"}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	for _, id := range []string{"c3", "c7"} {
		r = call("PUT", "/api/v1/users/"+id+"/tier", `{"tier":"gold"}`)
		require.Equal(t, http.StatusOK, r.status, r.raw)
	}
	exactly(3, "c3", "/ryw/a", 5, "tier gold, 3/min")

	r = call("POST", "/api/v1/users/c4/override", `{"rule_id":"ryw","limit":4,"window_seconds":60,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	exactly(4, "c4", "/ryw/a", 6, "override 4/min")

	r = call("POST", "/api/v1/users/c5/override", `{"rule_id":"ryw","block":true,"ttl_seconds":600}`, "Idempotency-Key", "block-c5")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	exactly(0, "c5", "/ryw/a", 2, "blocked")
	r = call("DELETE", "/api/v1/users/c5/override/ryw", "")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	exactly(1, "c5", "/ryw/a", 3, "block cleared: the rule's 1/min")

	r = call("DELETE", "/api/v1/rules/ryw-gold", "", "If-Match", "*")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	exactly(1, "c7", "/ryw/a", 3, "gold's tier row deleted: the base rule's 1/min decides a gold caller")
	r = call("DELETE", "/api/v1/rules/ryw", "", "If-Match", "*")
	require.Equal(t, http.StatusNoContent, r.status, r.raw)
	got, rules := burst(t, c, p, "c6", "/ryw/a", 3)
	require.Equal(t, 3, got, "deleted: nothing limits")
	require.Equal(t, []string{"", "", ""}, rules, "deleted: no rule applies")

	concurrentWriters(t, c, ps, token)
	pageSave(t, c, p, token)
}

// concurrentWriters: 8 writers at once, spread over the instances, each
// creating its own 2/min rule and checking it 3 times at once on the
// instance that answered: exactly 2 allowed for every one.
func concurrentWriters(t *testing.T, c *http.Client, ps []*ratelimitdtest.Daemon, token string) {
	t.Helper()
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			p := ps[i%len(ps)]
			body := fmt.Sprintf(`{"id":"cw-%d","dimension":"user","endpoint_pattern":"/cw/%d/**","limit":2,"window_seconds":60,"algorithm":"fixed_window"}`, i, i)
			req, err := http.NewRequest("POST", p.URL("/api/v1/rules"), strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := c.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				errs[i] = fmt.Errorf("writer %d: create: status %d", i, resp.StatusCode)
				return
			}
			if got, rules := burst(t, c, p, "w", fmt.Sprintf("/cw/%d/x", i), 3); got != 2 {
				errs[i] = fmt.Errorf("writer %d: 3 checks at once after its create allowed %d, want 2 (rules %v)", i, got, rules)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// pageSave: a rule saved on the admin page is in force on that instance
// when the page answers.
func pageSave(t *testing.T, c *http.Client, p instance, token string) {
	t.Helper()
	pc := pageClient(t)
	resp, _ := page(t, pc, http.MethodPost, p.URL("/admin/login"), url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body := page(t, pc, http.MethodGet, p.URL("/admin/rules/cw-0"), nil)
	csrf, etag := csrfField.FindStringSubmatch(body), etagField.FindStringSubmatch(body)
	require.NotNil(t, csrf, body)
	require.NotNil(t, etag, body)
	resp, body = page(t, pc, http.MethodPost, p.URL("/admin/rules/cw-0"), url.Values{
		"csrf": {csrf[1]}, "etag": {`"` + etag[1] + `"`}, "name": {"cw-0"}, "endpoint_pattern": {"/cw/0/**"},
		"limit": {"1"}, "window_seconds": {"60"}, "algorithm": {"fixed_window"}, "burst": {"0"}, "enabled": {"on"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	got, rules := burst(t, c, p, "page", "/cw/0/x", 3)
	require.Equal(t, 1, got, "saved on the page as 1/min: 3 checks at once right after, allowed %d (rules %v)", got, rules)
	_, body = page(t, pc, http.MethodGet, p.URL(resp.Header.Get("Location")), nil)
	require.Contains(t, body, "is in force on this instance")
}
