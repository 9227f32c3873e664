package rulesdb

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Incremental loads. A Source keeps the rows of its last good load (its
// state); a load of a newer revision reads, in one read transaction, only
// the rule, tier and override rows written since (their revision column)
// and the removals since from the audit log, which has exactly one row per
// revision. It patches the state with them. Override rows are never
// deleted (a clear, and the delete of their rule, rewrite them as
// tombstones with their revision; they lapse at their expiry), so every
// change to them is among the rows read. Anything it cannot account for
// makes it load fully instead: no state yet, a forced reload (a
// reconnect), the revision going backwards, a revision without its audit
// row, an audit action or row it does not know, more than maxDelta
// revisions to read, and, as a safety net, every fullEvery-th load and
// every fullAfter.
const (
	// DefaultFullReloadEvery is how many loads in a row may be incremental
	// before one is full again (the safety net).
	DefaultFullReloadEvery = 100
	// DefaultFullReloadAfter is how long a Source may go without a full
	// load (the safety net).
	DefaultFullReloadAfter = 5 * time.Minute
	// maxDelta bounds the revisions one incremental load reads; further
	// behind, a full load is cheaper.
	maxDelta = 10_000
)

type tierKey struct{ dim, id string }

type overrideKey struct{ dim, id, rule string }

func cmpTier(a, b tierKey) int {
	return cmp.Or(strings.Compare(a.dim, b.dim), strings.Compare(a.id, b.id))
}

func cmpOverride(a, b overrideKey) int {
	return cmp.Or(strings.Compare(a.dim, b.dim), strings.Compare(a.id, b.id), strings.Compare(a.rule, b.rule))
}

func ruleKey(r *Rule) string               { return r.ID }
func tierKeyOf(t TierAssignment) tierKey   { return tierKey{t.Dimension, t.Identifier} }
func overrideKeyOf(o Override) overrideKey { return overrideKey{o.Dimension, o.Identifier, o.RuleID} }

// canonical sorts the state's rows in the order a load keeps them (Go's
// byte order, whatever the database's collation): rules by ID, tiers by
// dimension and identifier, overrides by dimension, identifier and rule.
func (st *state) canonical() {
	sortBy(st.Rules, ruleKey, strings.Compare)
	sortBy(st.Tiers, tierKeyOf, cmpTier)
	sortBy(st.Overrides, overrideKeyOf, cmpOverride)
}

func sortBy[T, K any](s []T, key func(T) K, c func(a, b K) int) {
	f := func(a, b T) int { return c(key(a), key(b)) }
	if !slices.IsSortedFunc(s, f) {
		slices.SortFunc(s, f)
	}
}

// patch returns base (sorted by key) with the rows drop reports removed
// and the rows of up (any order) put in place of those of their key: one
// pass over base. It leaves base and up as they are.
func patch[T, K any](base []T, key func(T) K, c func(a, b K) int, drop func(T) bool, up []T) []T {
	up = slices.Clone(up)
	slices.SortFunc(up, func(a, b T) int { return c(key(a), key(b)) })
	out := make([]T, 0, len(base)+len(up))
	i := 0
	for _, b := range base {
		kb := key(b)
		for i < len(up) && c(key(up[i]), kb) < 0 {
			out = append(out, up[i])
			i++
		}
		if i < len(up) && c(key(up[i]), kb) == 0 {
			out = append(out, up[i])
			i++
			continue
		}
		if !drop(b) {
			out = append(out, b)
		}
	}
	out = append(out, up[i:]...)
	if len(out) == 0 {
		return nil // as a full load of no rows
	}
	return out
}

// removals are the rows the audit log says were removed since a state's
// revision (a removed row written again since is among the rows read).
type removals struct {
	rules map[string]bool // rule.delete
	tiers map[tierKey]bool
}

// readRemovals reads the audit rows of the revisions (from, to] and
// returns what they removed; ok is false when they do not account for
// every revision (a gap, an action this build does not know, a row it
// cannot read): the caller loads fully.
func readRemovals(ctx context.Context, tx *sql.Tx, db *DB, from, to int64) (rm *removals, ok bool, err error) {
	rows, err := tx.QueryContext(ctx, db.q(`SELECT revision, action, before_json FROM audit WHERE revision > ? AND revision <= ? ORDER BY revision`), from, to)
	if err != nil {
		return nil, false, fmt.Errorf("rulesdb: load: audit: %w", err)
	}
	defer func() { _ = rows.Close() }()
	rm = &removals{rules: map[string]bool{}, tiers: map[tierKey]bool{}}
	next := from + 1
	for rows.Next() {
		var rev int64
		var action string
		var before sql.NullString
		if err := rows.Scan(&rev, &action, &before); err != nil {
			return nil, false, fmt.Errorf("rulesdb: load: audit: %w", err)
		}
		if rev != next {
			return nil, false, nil // a revision without its audit row
		}
		next++
		switch action {
		case "rule.create", "rule.update", "tier.set", "override.set", "override.clear", "token.create", "token.revoke":
			// Rows written (read since the revision) or none of a load's.
		case ActionLimitReset, ActionStoreReset, ActionStoreOverrideSet, ActionStoreOverrideClear:
			// Changes of the store (Record): none of a load's.
		case "rule.delete":
			var r Rule
			if !before.Valid || json.Unmarshal([]byte(before.String), &r) != nil || r.ID == "" {
				return nil, false, nil
			}
			rm.rules[r.ID] = true
		case "tier.clear":
			var a TierAssignment
			if !before.Valid || json.Unmarshal([]byte(before.String), &a) != nil || a.Dimension == "" || a.Identifier == "" {
				return nil, false, nil
			}
			rm.tiers[tierKeyOf(a)] = true
		default:
			return nil, false, nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("rulesdb: load: audit: %w", err)
	}
	if next != to+1 {
		return nil, false, nil
	}
	return rm, true, nil
}

// readDelta fills st (whose Revision is read) from base and the rows
// written since base's revision, inside tx; ok is false when it cannot
// (see readRemovals), and st is then to be loaded fully.
func readDelta(ctx context.Context, tx *sql.Tx, db *DB, base, st *state, now time.Time) (ok bool, err error) {
	if st.Revision < base.Revision || st.Revision-base.Revision > maxDelta {
		return false, nil
	}
	rm, ok, err := readRemovals(ctx, tx, db, base.Revision, st.Revision)
	if err != nil || !ok {
		return false, err
	}
	rs, err := queryRules(ctx, tx, "load rules", db.q(`SELECT `+ruleSelect+` FROM rules WHERE revision > ?`), base.Revision)
	if err != nil {
		return false, err
	}
	ts, err := queryTiers(ctx, tx, db, base.Revision)
	if err != nil {
		return false, err
	}
	ovs, err := loadOverrides(ctx, tx, db, now, base.Revision)
	if err != nil {
		return false, err
	}
	st.Rules = patch(base.Rules, ruleKey, strings.Compare, func(r *Rule) bool { return rm.rules[r.ID] }, rs)
	st.Tiers = patch(base.Tiers, tierKeyOf, cmpTier, func(t TierAssignment) bool { return rm.tiers[tierKeyOf(t)] }, ts)
	// The rows read since include expired ones (an override set again
	// with an earlier expiry that has passed): they replace their key's
	// earlier row, then go with every other row expired at now.
	expired := func(o Override) bool { return !o.ExpiresAt.After(now) }
	st.Overrides = slices.DeleteFunc(patch(base.Overrides, overrideKeyOf, cmpOverride, expired, ovs), expired)
	if len(st.Overrides) == 0 {
		st.Overrides = nil // as a full load of no rows
	}
	return true, nil
}

// readFull fills st (whose Revision is read) with every row, inside tx.
func readFull(ctx context.Context, tx *sql.Tx, db *DB, st *state, now time.Time) error {
	var err error
	if st.Rules, err = loadRules(ctx, tx); err != nil {
		return err
	}
	if st.Tiers, err = queryTiers(ctx, tx, db, -1); err != nil {
		return err
	}
	if st.Overrides, err = loadOverrides(ctx, tx, db, now, -1); err != nil {
		return err
	}
	st.canonical()
	return nil
}

// queryTiers reads the tier assignments written after revision since (all
// of them for a negative since).
func queryTiers(ctx context.Context, tx *sql.Tx, db *DB, since int64) ([]TierAssignment, error) {
	query, args := `SELECT dimension, identifier, tier FROM user_tiers`, []any{}
	if since >= 0 {
		query += ` WHERE revision > ?`
		args = append(args, since)
	}
	rows, err := tx.QueryContext(ctx, db.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []TierAssignment
	for rows.Next() {
		var t TierAssignment
		if err := rows.Scan(&t.Dimension, &t.Identifier, &t.Tier); err != nil {
			return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rulesdb: load tiers: %w", err)
	}
	return out, nil
}
