package rulesdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Scope is what an admin token may do: ScopeRead reads, ScopeWrite reads
// and writes.
type Scope string

// The scopes of admin tokens.
const (
	// ScopeRead allows the admin API's GET and HEAD requests.
	ScopeRead Scope = "read"
	// ScopeWrite allows every admin request (write implies read).
	ScopeWrite Scope = "write"
)

// Allows reports whether a token of scope s may make a request needing
// need: write allows read and write, read allows read.
func (s Scope) Allows(need Scope) bool {
	return s == ScopeWrite || s == need && s == ScopeRead
}

// ParseScope returns the Scope named s ("read" or "write"), or an error
// naming the field.
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case ScopeRead, ScopeWrite:
		return Scope(s), nil
	}
	return "", &tokenError{msg: fmt.Sprintf("rulesdb: scope: must be read or write, got %q", s), is: ErrInvalid}
}

// ErrUnauthorized is returned by Authenticate for a secret that is no
// token's, or a revoked token's: the two are not told apart.
var ErrUnauthorized = errors.New("rulesdb: unauthorized")

// TokenPrefix starts every admin token secret, so that a leaked one is
// recognisable (by secret scanners, in logs).
const TokenPrefix = "slk_"

// tokenSecretLen is the length of a secret: the prefix and 32 random bytes
// in unpadded base64url (43 characters).
const tokenSecretLen = len(TokenPrefix) + (32*8+5)/6

// Token is a named admin API token. Its secret is shown once, by
// CreateToken; the database keeps only its SHA-256.
type Token struct {
	// Name names the token; it is the audit actor of its changes.
	Name string `json:"name"`
	// Scope is what the token may do.
	Scope Scope `json:"scope"`
	// CreatedAt is when the token was created.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the token was revoked; zero while it is valid.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// tokenError is an error about a named token that matches a store error
// (ErrExists, ErrNotFound) with errors.Is, with a message of its own.
type tokenError struct {
	msg string
	is  error
}

func (e *tokenError) Error() string { return e.msg }
func (e *tokenError) Unwrap() error { return e.is }

// validTokenName checks a token name: 1 to 64 of A-Z a-z 0-9 _ . -.
func validTokenName(name string) error {
	if name == "" || len(name) > 64 {
		return &tokenError{msg: fmt.Sprintf("rulesdb: token name: must be 1 to 64 characters, got %d", len(name)), is: ErrInvalid}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return &tokenError{msg: fmt.Sprintf("rulesdb: token name: %q: only A-Z a-z 0-9 _ . - are allowed", name), is: ErrInvalid}
		}
	}
	return nil
}

// hashSecret is the stored form of a secret: its SHA-256 in lower-case hex.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateToken creates the token name of scope and returns its secret
// ("slk_" and 32 random bytes in base64url), which is not stored and
// cannot be shown again: the database keeps its SHA-256 only. The name is
// 1 to 64 of A-Z a-z 0-9 _ . - and unique forever (a revoked token's name
// is not reused, so the audit's actors stay unambiguous): a taken name is
// refused with an error matching ErrExists. The creation is audited
// (action token.create, target token/NAME, after {name, scope}: never the
// secret or its hash).
func (d *DB) CreateToken(ctx context.Context, actor, name string, scope Scope) (string, Token, error) {
	if strings.TrimSpace(actor) == "" {
		return "", Token{}, errors.New("rulesdb: actor: required")
	}
	if err := validTokenName(name); err != nil {
		return "", Token{}, err
	}
	if _, err := ParseScope(string(scope)); err != nil {
		return "", Token{}, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", Token{}, fmt.Errorf("rulesdb: token.create: random: %w", err)
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return "", Token{}, fmt.Errorf("rulesdb: token.create: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM tokens WHERE name = ?`), name).Scan(&n); err != nil {
		return "", Token{}, fmt.Errorf("rulesdb: token.create: %w", err)
	}
	if n > 0 {
		return "", Token{}, &tokenError{msg: fmt.Sprintf("rulesdb: token %q already exists (names are never reused, even revoked)", name), is: ErrExists}
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return "", Token{}, err
	}
	now := d.now().UnixMilli()
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO tokens (name, hash, scope, created_at) VALUES (?, ?, ?, ?)`),
		name, hashSecret(secret), string(scope), now); err != nil {
		return "", Token{}, fmt.Errorf("rulesdb: token.create: %w", err)
	}
	t := Token{Name: name, Scope: scope, CreatedAt: time.UnixMilli(now).UTC()}
	after := struct {
		Name  string `json:"name"`
		Scope Scope  `json:"scope"`
	}{name, scope}
	if err := d.audit(ctx, tx, rev, now, actor, "token.create", "token/"+name, nil, after); err != nil {
		return "", Token{}, err
	}
	if err := tx.Commit(); err != nil {
		return "", Token{}, fmt.Errorf("rulesdb: token.create: commit: %w", err)
	}
	return secret, t, nil
}

// Authenticate returns the valid token whose secret is secret. The secret
// is hashed, looked up by its hash, and the stored hash compared with the
// computed one in constant time. An unknown, malformed or revoked secret
// is ErrUnauthorized, all alike; a database failure is another error.
func (d *DB) Authenticate(ctx context.Context, secret string) (Token, error) {
	if len(secret) != tokenSecretLen || !strings.HasPrefix(secret, TokenPrefix) {
		return Token{}, ErrUnauthorized
	}
	want := hashSecret(secret)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	var t Token
	var stored, scope string
	var created int64
	var revoked sql.NullInt64
	err := d.db.QueryRowContext(ctx, d.q(`SELECT name, hash, scope, created_at, revoked_at FROM tokens WHERE hash = ?`), want).
		Scan(&t.Name, &stored, &scope, &created, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrUnauthorized
	}
	if err != nil {
		return Token{}, fmt.Errorf("rulesdb: authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(stored), []byte(want)) != 1 || revoked.Valid {
		return Token{}, ErrUnauthorized
	}
	t.Scope, t.CreatedAt = Scope(scope), time.UnixMilli(created).UTC()
	return t, nil
}

// RevokeToken revokes the token name: Authenticate refuses it from then on.
// An unknown or already revoked name is an error matching ErrNotFound. The
// revocation is audited (action token.revoke, target token/NAME).
func (d *DB) RevokeToken(ctx context.Context, actor, name string) error {
	if strings.TrimSpace(actor) == "" {
		return errors.New("rulesdb: actor: required")
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.begin(ctx)
	if err != nil {
		return fmt.Errorf("rulesdb: token.revoke: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var scope string
	err = tx.QueryRowContext(ctx, d.q(`SELECT scope FROM tokens WHERE name = ? AND revoked_at IS NULL`), name).Scan(&scope)
	if errors.Is(err, sql.ErrNoRows) {
		return &tokenError{msg: fmt.Sprintf("rulesdb: no valid token %q", name), is: ErrNotFound}
	}
	if err != nil {
		return fmt.Errorf("rulesdb: token.revoke: %w", err)
	}
	rev, err := d.bump(ctx, tx)
	if err != nil {
		return err
	}
	now := d.now().UnixMilli()
	if _, err := tx.ExecContext(ctx, d.q(`UPDATE tokens SET revoked_at = ? WHERE name = ?`), now, name); err != nil {
		return fmt.Errorf("rulesdb: token.revoke: %w", err)
	}
	before := struct {
		Name  string `json:"name"`
		Scope Scope  `json:"scope"`
	}{name, Scope(scope)}
	if err := d.audit(ctx, tx, rev, now, actor, "token.revoke", "token/"+name, before, nil); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("rulesdb: token.revoke: commit: %w", err)
	}
	return nil
}

// Tokens returns every token, revoked ones included, by name. Secrets and
// hashes are never returned.
func (d *DB) Tokens(ctx context.Context) ([]Token, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT name, scope, created_at, revoked_at FROM tokens ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: tokens: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Token
	for rows.Next() {
		var t Token
		var scope string
		var created int64
		var revoked sql.NullInt64
		if err := rows.Scan(&t.Name, &scope, &created, &revoked); err != nil {
			return nil, fmt.Errorf("rulesdb: tokens: %w", err)
		}
		t.Scope, t.CreatedAt = Scope(scope), time.UnixMilli(created).UTC()
		if revoked.Valid {
			t.RevokedAt = time.UnixMilli(revoked.Int64).UTC()
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: tokens: %w", err)
	}
	return out, nil
}
