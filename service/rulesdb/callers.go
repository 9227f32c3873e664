package rulesdb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// CallerFilter selects callers for ListCallers; an empty field selects
// all.
type CallerFilter struct {
	// Dimension selects the callers of that dimension exactly.
	Dimension string
	// Identifier selects the callers whose identifier starts with it.
	Identifier string
}

// Caller is a caller the database holds something for: a tier
// assignment, overrides in force, or both.
type Caller struct {
	Dimension  string `json:"dimension"`
	Identifier string `json:"identifier"`
	// Tier is the caller's assigned tier; "" for none.
	Tier string `json:"tier,omitempty"`
	// Overrides counts the caller's overrides in force (not cleared, not
	// expired).
	Overrides int `json:"overrides"`
}

// ListCallers returns up to limit callers (1 to MaxPage) selected by f that
// have a tier or an override in force, in dimension and identifier order,
// after the position cursor ("" for the first page), and the opaque cursor
// of the next page ("" after the last). Paging is by key, as ListRules.
// Each table is read through its primary key, at most a page past the
// cursor, so a page costs the same whatever the number of callers.
func (d *DB) ListCallers(ctx context.Context, f CallerFilter, cursor string, limit int) ([]Caller, string, error) {
	if limit < 1 || limit > MaxPage {
		return nil, "", fmt.Errorf("rulesdb: limit: must be 1 to %d, got %d", MaxPage, limit)
	}
	for _, v := range [...]struct{ field, v string }{{"dimension", f.Dimension}, {"identifier", f.Identifier}} {
		if storableIdentifier(v.v) != nil {
			return nil, "", invalidField(v.field, "must be valid UTF-8 without NUL")
		}
	}
	var after *[2]string
	if cursor != "" {
		k, err := decodeCallerCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		after = &k
	}
	where, wargs := callerWhere(f, after)
	now := d.now().UnixMilli()
	query := `SELECT k.dimension, k.identifier, COALESCE(t.tier, ''),
		(SELECT COUNT(*) FROM overrides o WHERE o.dimension = k.dimension AND o.identifier = k.identifier AND o.cleared_at IS NULL AND o.expires_at > ?)
		FROM (SELECT dimension, identifier FROM (SELECT dimension, identifier FROM user_tiers WHERE ` + where + ` ORDER BY dimension, identifier LIMIT ?) a
		UNION SELECT dimension, identifier FROM (SELECT DISTINCT dimension, identifier FROM overrides WHERE ` + where + ` AND cleared_at IS NULL AND expires_at > ? ORDER BY dimension, identifier LIMIT ?) b) k
		LEFT JOIN user_tiers t ON t.dimension = k.dimension AND t.identifier = k.identifier
		ORDER BY k.dimension, k.identifier LIMIT ?`
	args := []any{now}
	args = append(args, wargs...)
	args = append(args, limit+1)
	args = append(args, wargs...)
	args = append(args, now, limit+1, limit+1)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, "", fmt.Errorf("rulesdb: callers: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Caller
	for rows.Next() {
		var c Caller
		if err := rows.Scan(&c.Dimension, &c.Identifier, &c.Tier, &c.Overrides); err != nil {
			return nil, "", fmt.Errorf("rulesdb: callers: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("rulesdb: callers: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = encodeCallerCursor(out[limit-1])
	}
	return out, next, nil
}

// callerWhere returns the conditions (never empty) of f past the key
// after, and their arguments.
func callerWhere(f CallerFilter, after *[2]string) (string, []any) {
	where := []string{"1 = 1"}
	var args []any
	if after != nil {
		where = append(where, "(dimension, identifier) > (?, ?)")
		args = append(args, after[0], after[1])
	}
	if f.Dimension != "" {
		where = append(where, "dimension = ?")
		args = append(args, f.Dimension)
	}
	if f.Identifier != "" {
		where = append(where, "substr(identifier, 1, ?) = ?")
		args = append(args, utf8.RuneCountInString(f.Identifier), f.Identifier)
	}
	return strings.Join(where, " AND "), args
}

func encodeCallerCursor(c Caller) string {
	b, _ := json.Marshal([2]string{c.Dimension, c.Identifier}) // two strings: cannot fail
	return base64.RawURLEncoding.EncodeToString(append([]byte("c:"), b...))
}

func decodeCallerCursor(cursor string) ([2]string, error) {
	var k [2]string
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return k, ErrCursor
	}
	js, ok := strings.CutPrefix(string(b), "c:")
	if !ok || json.Unmarshal([]byte(js), &k) != nil || storableIdentifier(k[0]) != nil || storableIdentifier(k[1]) != nil {
		return k, ErrCursor
	}
	return k, nil
}
