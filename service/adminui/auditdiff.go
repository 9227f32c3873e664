package adminui

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// fieldChange is one field an audited change set, changed or removed:
// its value before and after as the page shows it.
type fieldChange struct {
	Field         string
	Before, After string
	// BeforeAbsent and AfterAbsent mark the side without the field.
	BeforeAbsent, AfterAbsent bool
	// BeforeEmpty and AfterEmpty mark an empty string (shown as such).
	BeforeEmpty, AfterEmpty bool
}

// diffView is an audit entry as the page shows it: the fields it changed
// and the bookkeeping fields that moved with them (the rule's etag,
// revision and times, listed by name only).
type diffView struct {
	rulesdb.AuditEntry
	Changes  []fieldChange
	Bookkeep []string
	// Raw is set when before or after is not a JSON object (shown as it
	// is).
	Raw bool
	// Set is a creation (nothing before: each field shown with its
	// value), Removed a removal (nothing after: each field with the value
	// it had).
	Set, Removed bool
}

// bookkeeping are the fields the store sets on every write; a change to
// them is named, not shown.
var bookkeeping = []string{"etag", "revision", "created_at", "updated_at"}

// diffOf returns the field-by-field changes of e (rulesdb's Changes) as
// the page shows them.
func diffOf(e rulesdb.AuditEntry) diffView {
	v := diffView{AuditEntry: e}
	changes, ok := e.Changes()
	if !ok {
		v.Raw = true
		return v
	}
	befores, afters := 0, 0
	for _, c := range changes {
		if c.Before != nil {
			befores++
		}
		if c.After != nil {
			afters++
		}
		if slices.Contains(bookkeeping, c.Field) {
			v.Bookkeep = append(v.Bookkeep, c.Field)
			continue
		}
		fc := fieldChange{Field: c.Field, BeforeAbsent: c.Before == nil, AfterAbsent: c.After == nil}
		fc.Before, fc.BeforeEmpty = shown(c.Before)
		fc.After, fc.AfterEmpty = shown(c.After)
		v.Changes = append(v.Changes, fc)
	}
	v.Set, v.Removed = befores == 0 && afters > 0, afters == 0 && befores > 0
	return v
}

// shown is a JSON value as the page shows it: a string as its text
// (empty reports an empty string), anything else compacted.
func shown(raw json.RawMessage) (text string, empty bool) {
	if raw == nil {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s == ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw), false
	}
	return strings.TrimSpace(b.String()), false
}
