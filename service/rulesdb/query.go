package rulesdb

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrCursor is returned for a pagination cursor this store did not issue
// (or issued for another listing).
var ErrCursor = errors.New("rulesdb: cursor: malformed or not from this listing")

// MaxPage bounds a page of ListRules and AuditQuery.
const MaxPage = 1000

// RuleFilter selects rules for ListRules; an empty field selects all.
type RuleFilter struct {
	// Dimension, Tier and Algorithm select rules whose field equals them
	// exactly. Tier selects rows of that tier; it cannot select the rows
	// without one (list all and keep those with Tier "").
	Dimension, Tier, Algorithm string
	// ID and Endpoint select rules whose ID, or endpoint pattern, holds
	// them (case-sensitive); Name selects rules whose name holds it,
	// ignoring case (on SQLite, of ASCII letters only). These scan the
	// rules in ID order until a page is full: the rules table is small.
	ID, Name, Endpoint string
	// Enabled, when set, selects the enabled (true) or disabled rules.
	Enabled *bool
}

// ValidateRule checks one rule on its own, enabled or not, as every write
// does before it touches the database: what the engine would refuse of it
// whatever else is stored. The error wraps ErrInvalid and names the field;
// a valid rule may still be refused by a write for its conflict with the
// stored rules (two rules without a tier for one dimension and endpoint
// pattern, a tier row without its base rule).
func ValidateRule(r Rule) error { return validateRow(&r) }

// cursor encodes a position of a listing: the kind letter and the last key
// returned.
func encodeCursor(kind, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + key))
}

func decodeCursor(kind, c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", ErrCursor
	}
	key, ok := strings.CutPrefix(string(b), kind+":")
	if !ok || storableIdentifier(key) != nil { // a key no row can have (PostgreSQL would fail on it)
		return "", ErrCursor
	}
	return key, nil
}

// ListRules returns up to limit rules (1 to MaxPage) selected by f, in ID
// order, after the position cursor ("" for the first page) and the opaque
// cursor of the next page ("" after the last). Paging is by key: a rule
// that exists throughout a listing is returned exactly once, whatever is
// written between its pages.
func (d *DB) ListRules(ctx context.Context, f RuleFilter, cursor string, limit int) ([]*Rule, string, error) {
	if limit < 1 || limit > MaxPage {
		return nil, "", fmt.Errorf("rulesdb: limit: must be 1 to %d, got %d", MaxPage, limit)
	}
	after := ""
	if cursor != "" {
		var err error
		if after, err = decodeCursor("r", cursor); err != nil {
			return nil, "", err
		}
	}
	where := []string{"id > ?"}
	args := []any{after}
	for _, c := range []struct{ col, v string }{{"dimension", f.Dimension}, {"tier", f.Tier}, {"algorithm", f.Algorithm}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	for _, c := range []struct {
		col, v string
		fold   bool
	}{{"id", f.ID, false}, {"endpoint_pattern", f.Endpoint, false}, {"name", f.Name, true}} {
		if c.v != "" {
			where = append(where, d.contains(c.col, c.fold))
			args = append(args, c.v)
		}
	}
	if f.Enabled != nil {
		where = append(where, "enabled = ?")
		args = append(args, *f.Enabled)
	}
	args = append(args, limit+1)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	out, err := queryRules(ctx, d.db, "list", d.q(`SELECT `+ruleSelect+` FROM rules WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT ?`), args...)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = encodeCursor("r", out[limit-1].ID)
	}
	return out, next, nil
}

// AuditFilter selects audit entries for AuditQuery; an empty field selects
// all.
type AuditFilter struct {
	// Actor selects the entries of that actor (a token name) exactly.
	Actor string
	// Action selects the entries of that action exactly ("rule.update");
	// an Action ending in "." selects every action it prefixes ("rule.").
	Action string
	// Target selects the entries of that target exactly ("rule/orders");
	// a Target ending in "/" selects every target it prefixes
	// ("override/user/alice/").
	Target string
	// Since and Until select the entries written at or after Since and
	// before Until.
	Since, Until time.Time
	// Newest lists the newest entries first; the default is oldest first.
	Newest bool
	// Cursor is the position returned with the previous page ("" for the
	// first); it must come from a query of the same order.
	Cursor string
	// Limit is the page size, 1 to MaxPage (0 means 100).
	Limit int
}

// AuditQuery returns a page of the audit entries f selects, in revision
// order (oldest first unless f.Newest), and the opaque cursor of the next
// page ("" after the last). Entries are paged by revision, so entries
// written while a listing is paged are never returned twice, and those
// already there are never skipped.
func (d *DB) AuditQuery(ctx context.Context, f AuditFilter) ([]AuditEntry, string, error) {
	limit, err := f.validate()
	if err != nil {
		return nil, "", err
	}
	kind, cmp, order := "a", ">", "ASC"
	if f.Newest {
		kind, cmp, order = "d", "<", "DESC"
	}
	where, args, err := f.where(kind, cmp)
	if err != nil {
		return nil, "", err
	}
	query := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY revision ` + order + ` LIMIT ?`
	args = append(args, limit+1)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, "", fmt.Errorf("rulesdb: audit: %w", err)
	}
	out, err := scanAudit(rows)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = encodeCursor(kind, strconv.FormatInt(out[limit-1].Revision, 10))
	}
	return out, next, nil
}

// validate checks f's page size and window; it returns the page size
// (a Limit of 0 means 100).
func (f *AuditFilter) validate() (int, error) {
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > MaxPage {
		return 0, fmt.Errorf("rulesdb: limit: must be 1 to %d, got %d", MaxPage, limit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return 0, fmt.Errorf("rulesdb: until: must be after since")
	}
	return limit, nil
}

// where returns the conditions of the audit query f selects and their
// arguments, in a listing whose cursors are of kind, past a cursor's
// revision by cmp.
func (f *AuditFilter) where(kind, cmp string) (where []string, args []any, err error) {
	if f.Cursor != "" {
		key, err := decodeCursor(kind, f.Cursor)
		if err != nil {
			return nil, nil, err
		}
		rev, err := strconv.ParseInt(key, 10, 64)
		if err != nil || rev < 0 {
			return nil, nil, ErrCursor
		}
		where = append(where, "revision "+cmp+" ?")
		args = append(args, rev)
	}
	for _, c := range []struct{ col, v, sep string }{{"actor", f.Actor, ""}, {"action", f.Action, "."}, {"target", f.Target, "/"}} {
		w, a := exactOrPrefix(c.col, c.v, c.sep)
		where, args = append(where, w...), append(args, a...)
	}
	if !f.Since.IsZero() {
		where = append(where, "at >= ?")
		args = append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		where = append(where, "at < ?")
		args = append(args, f.Until.UnixMilli())
	}
	return where, args, nil
}

// exactOrPrefix returns the condition selecting the rows whose col equals
// v, or, when sep is set and v ends in it, starts with v; none for an
// empty v. A prefix is compared in characters, as both databases' substr
// counts them.
func exactOrPrefix(col, v, sep string) ([]string, []any) {
	switch {
	case v == "":
		return nil, nil
	case sep != "" && strings.HasSuffix(v, sep):
		return []string{"substr(" + col + ", 1, ?) = ?"}, []any{utf8.RuneCountInString(v), v}
	default:
		return []string{col + " = ?"}, []any{v}
	}
}

// contains returns the condition that the text col holds the argument
// (SQLite's instr, PostgreSQL's strpos: no pattern characters to escape),
// with fold both in lower case (SQLite lowers ASCII letters only).
func (d *DB) contains(col string, fold bool) string {
	arg := "?"
	if fold {
		col, arg = "lower("+col+")", "lower(?)"
	}
	if d.pg {
		return "strpos(" + col + ", " + arg + ") > 0"
	}
	return "instr(" + col + ", " + arg + ") > 0"
}
