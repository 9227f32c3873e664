package adminui

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// diffOf shows what a change set, field by field: only the members whose
// value differs (in before's order, then after's new ones), empty strings
// and absent members told apart, nested values compacted, the store's
// bookkeeping named apart; what is not an object is shown raw.
func TestDiffOf(t *testing.T) {
	entry := func(before, after string) rulesdb.AuditEntry {
		var e rulesdb.AuditEntry
		if before != "" {
			e.Before = json.RawMessage(before)
		}
		if after != "" {
			e.After = json.RawMessage(after)
		}
		return e
	}
	for _, c := range []struct {
		name          string
		before, after string
		want          []fieldChange
		bookkeep      []string
		raw           bool
		set, removed  bool
	}{
		{name: "update", before: `{"id":"a","limit":10,"tier":"","etag":"\"1\"","revision":1,"name":"x"}`,
			after: `{"id":"a","limit":2,"tier":"gold","etag":"\"4\"","revision":4,"name":"x","shadow":true}`,
			want: []fieldChange{{Field: "limit", Before: "10", After: "2"}, {Field: "tier", BeforeEmpty: true, After: "gold"},
				{Field: "shadow", BeforeAbsent: true, After: "true"}},
			bookkeep: []string{"etag", "revision"}},
		{name: "create", after: `{"dimension":"user","identifier":"<b>","tier":"gold"}`,
			want: []fieldChange{{Field: "dimension", BeforeAbsent: true, After: "user"}, {Field: "identifier", BeforeAbsent: true, After: "<b>"},
				{Field: "tier", BeforeAbsent: true, After: "gold"}}, set: true},
		{name: "delete", before: `{"name":"t","scope":"read"}`, after: "null",
			want: []fieldChange{{Field: "name", Before: "t", AfterAbsent: true}, {Field: "scope", Before: "read", AfterAbsent: true}}, removed: true},
		{name: "nested and spacing", before: `{"tiers": {"gold": 1, "a": [1, 2]}}`, after: `{"tiers":{"gold":1,"a":[1,2]}}`},
		{name: "nested changed", before: `{"tiers":{"gold":1}}`, after: `{"tiers":{"gold":2}}`,
			want: []fieldChange{{Field: "tiers", Before: `{"gold":1}`, After: `{"gold":2}`}}},
		{name: "not objects", before: `[1]`, after: `"x"`, raw: true},
		{name: "broken", before: `{"a":`, after: `{}`, raw: true},
		{name: "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := diffOf(entry(c.before, c.after))
			require.Equal(t, c.raw, v.Raw)
			require.Equal(t, c.set, v.Set)
			require.Equal(t, c.removed, v.Removed)
			require.Equal(t, c.want, v.Changes)
			require.Equal(t, c.bookkeep, v.Bookkeep)
		})
	}
}
