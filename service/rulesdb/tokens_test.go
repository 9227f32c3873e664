package rulesdb

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokens(t *testing.T) { each(t, testTokens) }

func testTokens(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)

	secret, tok, err := d.CreateToken(WithRequestID(ctx, "req-1"), "cli:root", "ci-deploy", ScopeWrite)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(secret, "slk_"), secret)
	require.Len(t, secret, 47)
	require.Equal(t, Token{Name: "ci-deploy", Scope: ScopeWrite, CreatedAt: tok.CreatedAt}, tok)

	// The row holds the SHA-256 of the secret, never the secret.
	var hash, scope string
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT hash, scope FROM tokens WHERE name = 'ci-deploy'`).Scan(&hash, &scope))
	sum := sha256.Sum256([]byte(secret))
	require.Equal(t, hex.EncodeToString(sum[:]), hash)
	require.Equal(t, "write", scope)
	var n int
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tokens WHERE hash LIKE '%slk_%' OR name LIKE '%slk_%'`).Scan(&n))
	require.Zero(t, n)

	got, err := d.Authenticate(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, tok, got)

	// Wrong secrets: another valid-looking one, a truncated one, garbage,
	// the hash itself.
	other := "slk_" + strings.Repeat("A", 43)
	for _, bad := range []string{other, secret[:len(secret)-1], "", "Bearer " + secret, hash, secret + "x"} {
		_, err := d.Authenticate(ctx, bad)
		require.ErrorIs(t, err, ErrUnauthorized, bad)
	}

	// Bad input changes nothing.
	_, _, err = d.CreateToken(ctx, "cli:root", "ci-deploy", ScopeRead)
	require.ErrorIs(t, err, ErrExists)
	require.ErrorContains(t, err, `token "ci-deploy" already exists`)
	_, _, err = d.CreateToken(ctx, "cli:root", "bad name", ScopeRead)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "token name")
	_, _, err = d.CreateToken(ctx, "cli:root", strings.Repeat("a", 65), ScopeRead)
	require.ErrorContains(t, err, "token name")
	_, _, err = d.CreateToken(ctx, "cli:root", "x", Scope("admin"))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "scope")
	_, _, err = d.CreateToken(ctx, " ", "x", ScopeRead)
	require.ErrorContains(t, err, "actor")
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, rev)

	rsecret, _, err := d.CreateToken(ctx, "cli:root", "dashboard", ScopeRead)
	require.NoError(t, err)
	ts, err := d.Tokens(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, "ci-deploy", ts[0].Name)
	require.Equal(t, ScopeRead, ts[1].Scope)

	// Revoked: refused like an unknown secret; its name is not reusable.
	require.NoError(t, d.RevokeToken(WithRequestID(ctx, "req-3"), "ops", "ci-deploy"))
	_, err = d.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrUnauthorized)
	_, err = d.Authenticate(ctx, rsecret)
	require.NoError(t, err)
	require.ErrorIs(t, d.RevokeToken(ctx, "ops", "ci-deploy"), ErrNotFound)
	require.ErrorIs(t, d.RevokeToken(ctx, "ops", "nope"), ErrNotFound)
	_, _, err = d.CreateToken(ctx, "cli:root", "ci-deploy", ScopeRead)
	require.ErrorIs(t, err, ErrExists)
	ts, err = d.Tokens(ctx)
	require.NoError(t, err)
	require.False(t, ts[0].RevokedAt.IsZero())
	require.True(t, ts[1].RevokedAt.IsZero())

	// One audit row per change, with its request id; never the secret or hash.
	es, err := d.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, es, 3)
	require.Equal(t, "token.create", es[0].Action)
	require.Equal(t, "cli:root", es[0].Actor)
	require.Equal(t, "token/ci-deploy", es[0].Target)
	require.Equal(t, "req-1", es[0].RequestID)
	require.JSONEq(t, `{"name":"ci-deploy","scope":"write"}`, string(es[0].After))
	require.Nil(t, es[0].Before)
	require.Equal(t, "", es[1].RequestID)
	require.Equal(t, "token.revoke", es[2].Action)
	require.Equal(t, "ops", es[2].Actor)
	require.Equal(t, "req-3", es[2].RequestID)
	require.Nil(t, es[2].After)
	all, _ := json.Marshal(es)
	require.NotContains(t, string(all), secret)
	require.NotContains(t, string(all), hash)
	require.NotContains(t, string(all), rsecret)
}

func TestRequestIDInRuleAudit(t *testing.T) { each(t, testRequestIDInRuleAudit) }

func testRequestIDInRuleAudit(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	_, err := d.Create(WithRequestID(ctx, "abc-123"), "alice", sample("a"))
	require.NoError(t, err)
	_, err = d.SetTier(WithRequestID(ctx, "abc-124"), "alice", "user", "u1", "gold")
	require.NoError(t, err)
	es, err := d.Audit(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, "abc-123", es[0].RequestID)
	require.Equal(t, "abc-124", es[1].RequestID)
	b, err := json.Marshal(es[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"request_id":"abc-123"`)
}

func TestIdempotency(t *testing.T) { each(t, testIdempotency) }

func testIdempotency(t *testing.T, dsn string) {
	ctx := tctx(t)
	d := open(t, dsn)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	d.now = func() time.Time { return now }
	h1, h2 := []byte{1, 2, 3}, []byte{4, 5, 6}

	// First: owns the key. Again while in flight: 409. Another body: 422.
	s, err := d.BeginIdempotent(ctx, "ci", "k1", h1)
	require.NoError(t, err)
	require.Nil(t, s)
	_, err = d.BeginIdempotent(ctx, "ci", "k1", h1)
	require.ErrorIs(t, err, ErrIdempotencyInFlight)
	_, err = d.BeginIdempotent(ctx, "ci", "k1", h2)
	require.ErrorIs(t, err, ErrIdempotencyMismatch)
	// Keys are per token.
	s, err = d.BeginIdempotent(ctx, "other", "k1", h2)
	require.NoError(t, err)
	require.Nil(t, s)

	resp := StoredResponse{Status: 201, Header: map[string]string{"Content-Type": "application/json", "Etag": `"7"`}, Body: []byte("{\"id\":\"a\"}\n\x00\xff")}
	require.NoError(t, d.FinishIdempotent(ctx, "ci", "k1", resp))
	s, err = d.BeginIdempotent(ctx, "ci", "k1", h1)
	require.NoError(t, err)
	require.Equal(t, &resp, s)
	_, err = d.BeginIdempotent(ctx, "ci", "k1", h2)
	require.ErrorIs(t, err, ErrIdempotencyMismatch)
	require.Error(t, d.FinishIdempotent(ctx, "ci", "k1", resp), "finished twice")

	// A 5xx is not stored: the key is released.
	_, err = d.BeginIdempotent(ctx, "ci", "k2", h1)
	require.NoError(t, err)
	require.NoError(t, d.FinishIdempotent(ctx, "ci", "k2", StoredResponse{Status: 503}))
	s, err = d.BeginIdempotent(ctx, "ci", "k2", h2)
	require.NoError(t, err)
	require.Nil(t, s)

	// Abandoned without a write: claimable again after the bound.
	_, err = d.BeginIdempotent(ctx, "ci", "k3", h1)
	require.NoError(t, err)
	now = now.Add(IdempotencyAbandoned - time.Millisecond)
	_, err = d.BeginIdempotent(ctx, "ci", "k3", h1)
	require.ErrorIs(t, err, ErrIdempotencyInFlight)
	now = now.Add(2 * time.Millisecond)
	s, err = d.BeginIdempotent(ctx, "ci", "k3", h1)
	require.NoError(t, err)
	require.Nil(t, s)

	// A write under the key marks it in the write's transaction: abandoned
	// after that, the request is not run again, and a 5xx is stored.
	_, err = d.BeginIdempotent(ctx, "ci", "k4", h1)
	require.NoError(t, err)
	_, err = d.Create(WithIdempotency(ctx, "ci", "k4"), "ci", sample("r4"))
	require.NoError(t, err)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	_, err = d.BeginIdempotent(ctx, "ci", "k4", h1)
	require.ErrorIs(t, err, ErrIdempotencyInFlight)
	now = now.Add(IdempotencyAbandoned + time.Second)
	s, err = d.BeginIdempotent(ctx, "ci", "k4", h1)
	require.NoError(t, err)
	require.Equal(t, 409, s.Status)
	require.Contains(t, string(s.Body), "revision "+itoa(rev))
	require.NoError(t, d.FinishIdempotent(ctx, "ci", "k4", StoredResponse{Status: 500, Body: []byte("late")}))
	s, err = d.BeginIdempotent(ctx, "ci", "k4", h1)
	require.NoError(t, err)
	require.Equal(t, 500, s.Status, "a 5xx after a committed write is kept")

	// Expiry after 24 h: the rows go, the key is new.
	now = now.Add(IdempotencyTTL + time.Second)
	s, err = d.BeginIdempotent(ctx, "ci", "k1", h2)
	require.NoError(t, err)
	require.Nil(t, s)
	var rows int
	require.NoError(t, d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM idempotency`).Scan(&rows))
	require.Equal(t, 1, rows)

	_, err = d.BeginIdempotent(ctx, "", "k", h1)
	require.Error(t, err)
	require.Error(t, d.FinishIdempotent(ctx, "ci", "k1", StoredResponse{Status: 0}))
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Concurrent creates of one name on two handles: one token, the others
// ErrExists; concurrent claims of one idempotency key: one owner, the
// others in flight.
func TestTokensAndKeysConcurrent(t *testing.T) { each(t, testTokensAndKeysConcurrent) }

func testTokensAndKeysConcurrent(t *testing.T, dsn string) {
	ctx := tctx(t)
	a, b := open(t, dsn), open(t, dsn)
	const n = 8
	errs := make([]error, n)
	owners := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		d := []*DB{a, b}[i%2]
		wg.Go(func() { _, _, errs[i] = d.CreateToken(ctx, "ops", "dup", ScopeRead) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, err, ErrExists)
	}
	require.Equal(t, 1, ok)
	for i := range n {
		d := []*DB{a, b}[i%2]
		wg.Go(func() {
			var s *StoredResponse
			s, errs[i] = d.BeginIdempotent(ctx, "dup", "k", []byte("h"))
			owners[i] = errs[i] == nil && s == nil
		})
	}
	wg.Wait()
	ok = 0
	for i, err := range errs {
		if owners[i] {
			ok++
			continue
		}
		require.ErrorIs(t, err, ErrIdempotencyInFlight)
	}
	require.Equal(t, 1, ok)
	es, err := a.Audit(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, es, 1)
}
