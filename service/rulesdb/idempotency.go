package rulesdb

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// requestIDKey and idempotencyKey are the context keys of WithRequestID and
// WithIdempotency.
type (
	requestIDKey   struct{}
	idempotencyKey struct{}
)

// WithRequestID returns ctx carrying the id of the admin request it serves:
// every audit row written under it records the id (AuditEntry.RequestID).
// The caller bounds and sanitises id (package adminauth does).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries (see WithRequestID), or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// Errors of BeginIdempotent.
var (
	// ErrIdempotencyMismatch: the key was used for a request with another
	// method, path or body (HTTP 422).
	ErrIdempotencyMismatch = errors.New("rulesdb: idempotency key reused with a different request")
	// ErrIdempotencyInFlight: the key's first request is still running
	// (HTTP 409).
	ErrIdempotencyInFlight = errors.New("rulesdb: idempotency key's request is in flight")
)

// IdempotencyTTL is how long a key's stored response is kept: a request
// with the key after that runs as new. Expired rows are deleted lazily, by
// BeginIdempotent.
const IdempotencyTTL = 24 * time.Hour

// IdempotencyAbandoned is how old a key's in-flight row must be to be taken
// as abandoned (its request's process died before it finished): a request
// with the key then runs, unless the first one's write had committed.
const IdempotencyAbandoned = time.Minute

// StoredResponse is the response stored for an idempotency key, replayed to
// a repeated request.
type StoredResponse struct {
	Status int
	Header map[string]string
	Body   []byte
}

// idemClaim is the idempotency key that a request owns, carried by its
// context (WithIdempotency).
type idemClaim struct{ token, key string }

// WithIdempotency returns ctx carrying the idempotency key that its request
// owns (BeginIdempotent returned nil, nil): every write made under ctx
// records, in its own transaction, that the key's request has committed a
// write (its revision). A process killed after that commit and before
// FinishIdempotent thus never runs the request a second time: a replay is
// told it was applied (see BeginIdempotent).
func WithIdempotency(ctx context.Context, token, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, idemClaim{token, key})
}

// markApplied records, in the write's transaction tx, that the request
// owning ctx's idempotency key committed revision rev.
func (d *DB) markApplied(ctx context.Context, tx *sql.Tx, rev int64) error {
	c, ok := ctx.Value(idempotencyKey{}).(idemClaim)
	if !ok {
		return nil
	}
	if _, err := tx.ExecContext(ctx, d.q(`UPDATE idempotency SET revision = ? WHERE token = ? AND "key" = ? AND status = 0`), rev, c.token, c.key); err != nil {
		return fmt.Errorf("rulesdb: idempotency: %w", err)
	}
	return nil
}

// BeginIdempotent claims key for token's request whose hash (of method,
// path and body) is requestHash. nil, nil: the request owns the key and
// runs (its row is in flight until FinishIdempotent); a stored response: the
// key's first request finished, replay it. ErrIdempotencyMismatch: the key
// was used for another request. ErrIdempotencyInFlight: its first request
// is still running.
//
// An in-flight row older than IdempotencyAbandoned is abandoned: if its
// request had committed no write the key is claimed afresh; if it had, the
// replay is a 409 problem saying the request was applied (and at which
// revision) but its response was not recorded. Rows older than
// IdempotencyTTL are deleted here.
func (d *DB) BeginIdempotent(ctx context.Context, token, key string, requestHash []byte) (*StoredResponse, error) {
	if token == "" || key == "" || len(requestHash) == 0 {
		return nil, errors.New("rulesdb: idempotency: token, key and request hash are required")
	}
	h := hex.EncodeToString(requestHash)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	now := d.now()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: idempotency: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	claimed, err := d.claimIdempotent(ctx, tx, token, key, h, now)
	if err != nil {
		return nil, err
	}
	if claimed {
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("rulesdb: idempotency: commit: %w", err)
		}
		return nil, nil
	}
	return d.replayIdempotent(ctx, tx, token, key, h, now)
}

// claimIdempotent deletes, in tx, the rows past IdempotencyTTL and key's
// row if abandoned with no write, then claims key for token's request of
// hash h: true when the row is this request's, false when another
// request's row holds the key.
func (d *DB) claimIdempotent(ctx context.Context, tx *sql.Tx, token, key, h string, now time.Time) (bool, error) {
	if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM idempotency WHERE created_at < ?`), now.Add(-IdempotencyTTL).UnixMilli()); err != nil {
		return false, fmt.Errorf("rulesdb: idempotency: expire: %w", err)
	}
	if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM idempotency WHERE token = ? AND "key" = ? AND status = 0 AND revision IS NULL AND created_at < ?`),
		token, key, now.Add(-IdempotencyAbandoned).UnixMilli()); err != nil {
		return false, fmt.Errorf("rulesdb: idempotency: abandoned: %w", err)
	}
	res, err := tx.ExecContext(ctx, d.q(`INSERT INTO idempotency (token, "key", request_hash, status, created_at) VALUES (?, ?, ?, 0, ?)
		ON CONFLICT (token, "key") DO NOTHING`), token, key, h, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("rulesdb: idempotency: claim: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("rulesdb: idempotency: claim: %w", err)
	}
	return n == 1, nil
}

// replayIdempotent reads, in tx, the row that holds token's key for the
// request of hash h: its stored response, or why there is none to replay
// (another request, or one still in flight, or applied but not recorded).
func (d *DB) replayIdempotent(ctx context.Context, tx *sql.Tx, token, key, h string, now time.Time) (*StoredResponse, error) {
	var stored string
	var status int
	var header, body sql.NullString
	var rev sql.NullInt64
	var created int64
	if err := tx.QueryRowContext(ctx, d.q(`SELECT request_hash, status, header_json, body, revision, created_at FROM idempotency WHERE token = ? AND "key" = ?`), token, key).
		Scan(&stored, &status, &header, &body, &rev, &created); err != nil {
		return nil, fmt.Errorf("rulesdb: idempotency: read: %w", err)
	}
	switch {
	case stored != h:
		return nil, ErrIdempotencyMismatch
	case status == 0 && (!rev.Valid || created >= now.Add(-IdempotencyAbandoned).UnixMilli()):
		return nil, ErrIdempotencyInFlight
	case status == 0:
		return appliedUnrecorded(rev.Int64), nil
	}
	out := &StoredResponse{Status: status, Header: map[string]string{}}
	if header.Valid {
		if err := json.Unmarshal([]byte(header.String), &out.Header); err != nil {
			return nil, fmt.Errorf("rulesdb: idempotency: header_json: %w", err)
		}
	}
	if body.Valid {
		var err error
		if out.Body, err = base64.StdEncoding.DecodeString(body.String); err != nil {
			return nil, fmt.Errorf("rulesdb: idempotency: body: %w", err)
		}
	}
	return out, nil
}

// appliedUnrecorded is the replay of a key whose request committed
// revision rev and died before its response was stored.
func appliedUnrecorded(rev int64) *StoredResponse {
	body, _ := json.Marshal(map[string]any{
		"type":     "about:blank",
		"title":    "Already applied",
		"status":   http.StatusConflict,
		"detail":   "the first request with this Idempotency-Key was applied (revision " + strconv.FormatInt(rev, 10) + ") but its response was not recorded: read the resource for its state",
		"revision": rev,
	})
	return &StoredResponse{Status: http.StatusConflict, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: append(body, '\n')}
}

// FinishIdempotent stores resp as the response of token's request that
// owns key, to be replayed for IdempotencyTTL. A 5xx response is not
// stored: the key is released so that the client may retry, unless the
// request had already committed a write (then it is stored, so the write
// is never made twice).
func (d *DB) FinishIdempotent(ctx context.Context, token, key string, resp StoredResponse) error {
	if resp.Status < 100 || resp.Status > 999 {
		return fmt.Errorf("rulesdb: idempotency: status: must be an HTTP status, got %d", resp.Status)
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if resp.Status >= 500 {
		res, err := d.db.ExecContext(ctx, d.q(`DELETE FROM idempotency WHERE token = ? AND "key" = ? AND status = 0 AND revision IS NULL`), token, key)
		if err != nil {
			return fmt.Errorf("rulesdb: idempotency: release: %w", err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			return nil
		}
	}
	header := resp.Header
	if header == nil {
		header = map[string]string{}
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("rulesdb: idempotency: header: %w", err)
	}
	res, err := d.db.ExecContext(ctx, d.q(`UPDATE idempotency SET status = ?, header_json = ?, body = ? WHERE token = ? AND "key" = ? AND status = 0`),
		resp.Status, string(hj), base64.StdEncoding.EncodeToString(resp.Body), token, key)
	if err != nil {
		return fmt.Errorf("rulesdb: idempotency: store: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("rulesdb: idempotency: store: %w", err)
	} else if n != 1 {
		return fmt.Errorf("rulesdb: idempotency: store: key %q of token %q is not in flight", key, token)
	}
	return nil
}
