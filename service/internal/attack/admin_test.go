package attack

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// TestAttackAdminLimitNotARule: the admin API's per-token limits count in
// the service's store under the policies admin_read and admin_write, the
// identity "token:NAME". A rule given one of those ids would count on the
// same keys: an override of it would raise a token's own admin limit (or
// block another token's admin calls for 30 days), and unauthenticated
// checks of it would spend a token's admin budget. Such ids are refused.
func TestAttackAdminLimitNotARule(t *testing.T) {
	s := startAdminStack(t, "", memStore(t), adminauth.Options{WritesPerMinute: 5, ReadsPerMinute: 50}, "mallory", "victim")
	for _, id := range []string{adminauth.PolicyRead, adminauth.PolicyWrite} {
		st, _, body := s.do("mallory", http.MethodPost, "/api/v1/rules", map[string]any{
			"id": id, "name": "x", "dimension": "user", "limit": 1, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true,
		})
		require.Equal(t, http.StatusBadRequest, st, "rule id %q: %s", id, body)
		require.Contains(t, string(body), `"field":"id"`)
	}
	s.waitRevision()
	// Nothing reached the store: mallory and victim keep their budgets
	// (mallory spent 2 of 5 writes above).
	for i := range 3 {
		st, _, body := s.do("mallory", http.MethodPut, "/api/v1/users/u1/tier", map[string]any{"tier": "t" + string(rune('a'+i))})
		require.Equal(t, http.StatusOK, st, "%s", body)
	}
	st, h, _ := s.do("mallory", http.MethodPut, "/api/v1/users/u1/tier", map[string]any{"tier": "z"})
	require.Equal(t, http.StatusTooManyRequests, st)
	require.NotEmpty(t, h.Get("Retry-After"))
	st, _, body := s.do("victim", http.MethodGet, "/api/v1/rules", nil)
	require.Equal(t, http.StatusOK, st, "%s", body)
}

// TestAttackOverrideClearedWhileDown: an override cleared (or its rule's
// overrides deleted) while no instance runs is gone when one starts again:
// the store (Redis, which outlives the instances) must not keep blocking
// the caller until the override's old expiry. The instance learns of the
// clear from the database, which keeps a cleared override's tombstone
// until its expiry.
func TestAttackOverrideClearedWhileDown(t *testing.T) {
	addr := newRedis(t)
	onDBs(t, func(t *testing.T, dsn string) { testOverrideClearedWhileDown(t, addr, dsn) })
}

func testOverrideClearedWhileDown(t *testing.T, addr, dsn string) {
	checkOn := func(s *adminStack, user, endpoint string) bool {
		st, _, body := s.do("", http.MethodPost, "/api/v1/rate-limit/check", map[string]any{"key_type": "user", "key_value": user, "endpoint": endpoint})
		require.Equal(t, http.StatusOK, st, "%s", body)
		var out struct{ Allowed bool }
		require.NoError(t, json.Unmarshal(body, &out))
		return out.Allowed
	}
	check := func(s *adminStack, user string) bool { return checkOn(s, user, "/") }
	t.Run("running", func(t *testing.T) {
		s := startAdminStack(t, dsn, redisStore(t, addr), adminauth.Options{}, "ops")
		st, _, body := s.do("ops", http.MethodPost, "/api/v1/rules", map[string]any{
			"id": "api", "name": "api", "dimension": "user", "limit": 100, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true})
		require.Equal(t, http.StatusCreated, st, "%s", body)
		for _, u := range []string{"blocked-then-cleared", "limited-then-cleared"} {
			o := map[string]any{"rule_id": "api", "block": true, "ttl_seconds": 3600}
			if u == "limited-then-cleared" {
				o = map[string]any{"rule_id": "api", "limit": 1, "window_seconds": 3600, "ttl_seconds": 3600}
			}
			st, _, body = s.do("ops", http.MethodPost, "/api/v1/users/"+u+"/override", o)
			require.Equal(t, http.StatusCreated, st, "%s", body)
		}
		web := map[string]any{"id": "web", "name": "web", "dimension": "user", "endpoint_pattern": "/web/**", "limit": 100, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true}
		st, _, body = s.do("ops", http.MethodPost, "/api/v1/rules", web)
		require.Equal(t, http.StatusCreated, st, "%s", body)
		st, _, body = s.do("ops", http.MethodPost, "/api/v1/users/blocked-on-web/override", map[string]any{"rule_id": "web", "block": true, "ttl_seconds": 3600})
		require.Equal(t, http.StatusCreated, st, "%s", body)
		s.waitRevision()
		require.Eventually(t, func() bool { return !checkOn(s, "blocked-on-web", "/web/x") }, 5*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool { return !check(s, "blocked-then-cleared") }, 5*time.Second, 10*time.Millisecond)
		require.True(t, check(s, "limited-then-cleared"))
		require.False(t, check(s, "limited-then-cleared"))
	})
	// Every instance is down: the overrides are cleared in the database
	// (ratelimitd's CLI, or an instance on another store).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	_, err = db.ClearOverride(ctx, "ops", "user", "blocked-then-cleared", "api")
	require.NoError(t, err)
	_, err = db.ClearOverride(ctx, "ops", "user", "limited-then-cleared", "api")
	require.NoError(t, err)
	// The rule "web" deleted (its overrides with it) and created again.
	web, err := db.Get(ctx, "web")
	require.NoError(t, err)
	_, err = db.Delete(ctx, "ops", "web", web.ETag)
	require.NoError(t, err)
	web.ETag, web.Revision = "", 0
	_, err = db.Create(ctx, "ops", *web)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	t.Run("restarted", func(t *testing.T) {
		s := startAdminStack(t, dsn, redisStore(t, addr), adminauth.Options{})
		s.waitRevision()
		require.Eventually(t, func() bool { return check(s, "blocked-then-cleared") }, 3*time.Second, 20*time.Millisecond,
			"a cleared block still denies after a restart")
		require.True(t, check(s, "limited-then-cleared"), "a cleared override still limits after a restart")
		require.True(t, checkOn(s, "blocked-on-web", "/web/x"), "a block of a deleted rule holds when it is created again")
		st, _, body := s.do("", http.MethodGet, "/api/v1/users/blocked-then-cleared/override", nil)
		require.Equal(t, http.StatusUnauthorized, st, "%s", body)
	})
}

// TestAttackIdempotencyKeyOtherQuery: an Idempotency-Key reused for a POST
// to the same path with another query (?dimension= names whose override
// it is) is another request: 422, never the first one's stored 201 (the
// client would believe an override set that was not).
func TestAttackIdempotencyKeyOtherQuery(t *testing.T) {
	s := startAdminStack(t, "", memStore(t), adminauth.Options{}, "ops")
	for _, dim := range []string{"user", "ip"} {
		st, _, body := s.do("ops", http.MethodPost, "/api/v1/rules", map[string]any{
			"id": "by-" + dim, "name": dim, "dimension": dim, "limit": 100, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true})
		require.Equal(t, http.StatusCreated, st, "%s", body)
	}
	o := map[string]any{"rule_id": "by-user", "block": true, "ttl_seconds": 600}
	st, _, body := s.do("ops", http.MethodPost, "/api/v1/users/10.0.0.1/override?dimension=user", o, "Idempotency-Key", "K1")
	require.Equal(t, http.StatusCreated, st, "%s", body)
	st, h, body := s.do("ops", http.MethodPost, "/api/v1/users/10.0.0.1/override?dimension=user", o, "Idempotency-Key", "K1")
	require.Equal(t, http.StatusCreated, st, "%s", body)
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	st, h, body = s.do("ops", http.MethodPost, "/api/v1/users/10.0.0.1/override?dimension=ip", o, "Idempotency-Key", "K1")
	require.Equal(t, http.StatusUnprocessableEntity, st, "replayed: %q %s", h.Get("Idempotent-Replayed"), body)
	os, err := s.db.Overrides(s.ctx, "ip", "10.0.0.1", time.Now())
	require.NoError(t, err)
	require.Empty(t, os)
}

// TestAttackIdentifierTheDatabaseCannotStore: a caller's identifier with a
// NUL byte or invalid UTF-8 (PostgreSQL's text refuses both) is bad input:
// 400 naming id, nothing written, no database error logged and answered
// 503. On SQLite and PostgreSQL alike.
func TestAttackIdentifierTheDatabaseCannotStore(t *testing.T) {
	onDBs(t, func(t *testing.T, dsn string) {
		s := startAdminStack(t, dsn, memStore(t), adminauth.Options{}, "ops")
		st, _, body := s.do("ops", http.MethodPost, "/api/v1/rules", map[string]any{
			"id": "api", "name": "api", "dimension": "user", "limit": 100, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true})
		require.Equal(t, http.StatusCreated, st, "%s", body)
		rev, err := s.db.Revision(s.ctx)
		require.NoError(t, err)
		for _, id := range []string{"a%00b", "a%FFb", "%C3%28"} {
			st, _, body = s.do("ops", http.MethodPut, "/api/v1/users/"+id+"/tier", map[string]any{"tier": "pro"})
			require.Equal(t, http.StatusBadRequest, st, "tier of %s: %s", id, body)
			require.Contains(t, string(body), `"field":"id"`)
			st, _, body = s.do("ops", http.MethodPost, "/api/v1/users/"+id+"/override", map[string]any{"rule_id": "api", "block": true, "ttl_seconds": 60})
			require.Equal(t, http.StatusBadRequest, st, "override of %s: %s", id, body)
			st, _, body = s.do("ops", http.MethodDelete, "/api/v1/users/"+id+"/override/api", nil)
			require.Equal(t, http.StatusBadRequest, st, "override clear of %s: %s", id, body)
			st, _, body = s.do("ops", http.MethodGet, "/api/v1/users/"+id+"/override", nil)
			require.Equal(t, http.StatusBadRequest, st, "overrides of %s: %s", id, body)
		}
		after, err := s.db.Revision(s.ctx)
		require.NoError(t, err)
		require.Equal(t, rev, after)
	})
}

// TestAttackForgedCursor: a rules cursor forged to hold a key no row can
// have (invalid UTF-8, a NUL byte) is a bad cursor (400 naming cursor),
// not a database failure (PostgreSQL refused it: 503).
func TestAttackForgedCursor(t *testing.T) {
	onDBs(t, func(t *testing.T, dsn string) {
		s := startAdminStack(t, dsn, memStore(t), adminauth.Options{}, "ops")
		for _, key := range []string{"r:\xff", "r:a\x00"} {
			st, _, body := s.do("ops", http.MethodGet, "/api/v1/rules?cursor="+base64.RawURLEncoding.EncodeToString([]byte(key)), nil)
			require.Equal(t, http.StatusBadRequest, st, "%q: %s", key, body)
			require.Contains(t, string(body), `"field":"cursor"`)
		}
	})
}

// TestAttackIdempotencyKeyRacedOnTwoInstances: one Idempotency-Key sent
// 24 times at once, half through each of two instances on one PostgreSQL
// database: the write is made once (one audit row), one answer is the
// original, the others its replay (Idempotent-Replayed) or 409 in flight,
// never a second write.
func TestAttackIdempotencyKeyRacedOnTwoInstances(t *testing.T) {
	dsn := pg.NewDatabase(t)
	a := startAdminStack(t, dsn, memStore(t), adminauth.Options{}, "ops")
	b := startAdminStack(t, dsn, memStore(t), adminauth.Options{})
	b.tokens = a.tokens
	st, _, body := a.do("ops", http.MethodPost, "/api/v1/rules", map[string]any{
		"id": "api", "name": "api", "dimension": "user", "limit": 100, "window_seconds": 60, "algorithm": "fixed_window", "enabled": true})
	require.Equal(t, http.StatusCreated, st, "%s", body)
	o := map[string]any{"rule_id": "api", "limit": 5, "window_seconds": 60, "ttl_seconds": 600}
	type answer struct {
		status   int
		replayed bool
	}
	answers := make(chan answer, 24)
	var wg sync.WaitGroup
	for i := range 24 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			st, h, _ := s.do("ops", http.MethodPost, "/api/v1/users/raced/override", o, "Idempotency-Key", "RACE-1")
			answers <- answer{st, h.Get("Idempotent-Replayed") == "true"}
		})
	}
	wg.Wait()
	close(answers)
	original := 0
	for ans := range answers {
		switch {
		case ans.status == http.StatusCreated && !ans.replayed:
			original++
		case ans.status == http.StatusCreated, ans.status == http.StatusConflict:
		default:
			t.Fatalf("unexpected answer %d", ans.status)
		}
	}
	require.Equal(t, 1, original)
	es, err := a.db.Audit(a.ctx, 0, 1000)
	require.NoError(t, err)
	sets := 0
	for _, e := range es {
		if e.Action == "override.set" {
			sets++
		}
	}
	require.Equal(t, 1, sets, "the write was made once")
}

// TestAttackRevokedTokenOnEveryInstance: a token revoked through one
// instance is refused by every instance within the authentication cache's
// TTL (1 s here; 5 s by default), even one that keeps using it every few
// milliseconds (its cached entry is never extended by use).
func TestAttackRevokedTokenOnEveryInstance(t *testing.T) {
	dsn := pg.NewDatabase(t)
	o := adminauth.Options{CacheTTL: time.Second, ReadsPerMinute: 100000}
	a := startAdminStack(t, dsn, memStore(t), o, "ops")
	b := startAdminStack(t, dsn, memStore(t), o)
	b.tokens = a.tokens
	for _, s := range []*adminStack{a, b} {
		st, _, body := s.do("ops", http.MethodGet, "/api/v1/rules", nil)
		require.Equal(t, http.StatusOK, st, "%s", body)
	}
	require.NoError(t, a.db.RevokeToken(a.ctx, "cli", "ops"))
	revoked := time.Now()
	for _, s := range []*adminStack{a, b} {
		for {
			st, _, _ := s.do("ops", http.MethodGet, "/api/v1/rules", nil)
			if st == http.StatusUnauthorized {
				break
			}
			require.Equal(t, http.StatusOK, st)
			require.Less(t, time.Since(revoked), 1500*time.Millisecond, "a revoked token still accepted")
			time.Sleep(5 * time.Millisecond)
		}
	}
}
