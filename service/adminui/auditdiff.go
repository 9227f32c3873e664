package adminui

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// fieldChange is one field an audited change set, changed or removed:
// its value before and after ("" with Absent on that side: the field was
// not there).
type fieldChange struct {
	Field                     string
	Before, After             string
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

// diffOf returns the field-by-field changes of e: every member of its
// before and after objects whose value differs (in before's order, then
// the members only after has, in its order).
func diffOf(e rulesdb.AuditEntry) diffView {
	v := diffView{AuditEntry: e}
	before, okB := members(e.Before)
	after, okA := members(e.After)
	if !okB || !okA {
		v.Raw = true
		return v
	}
	v.Set, v.Removed = len(before) == 0 && len(after) > 0, len(after) == 0 && len(before) > 0
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		b, inB := lookup(before, name)
		a, inA := lookup(after, name)
		if inB && inA && sameJSON(b, a) {
			return
		}
		if slices.Contains(bookkeeping, name) {
			v.Bookkeep = append(v.Bookkeep, name)
			return
		}
		c := fieldChange{Field: name, BeforeAbsent: !inB, AfterAbsent: !inA}
		c.Before, c.BeforeEmpty = shown(b)
		c.After, c.AfterEmpty = shown(a)
		v.Changes = append(v.Changes, c)
	}
	for _, m := range before {
		add(m.name)
	}
	for _, m := range after {
		add(m.name)
	}
	return v
}

// member is one member of a JSON object, its value as written.
type member struct {
	name string
	raw  json.RawMessage
}

// members returns the members of the JSON object raw in their order; an
// absent (nil) or null raw is an object without members. ok is false when
// raw is something else.
func members(raw json.RawMessage) ([]member, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		name, isName := tok.(string)
		if err != nil || !isName {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{name: name, raw: v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	return out, true
}

func lookup(ms []member, name string) (json.RawMessage, bool) {
	for _, m := range ms {
		if m.name == name {
			return m.raw, true
		}
	}
	return nil, false
}

// sameJSON reports whether two JSON values are written alike once
// compacted (the store writes them with encoding/json: one form each).
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
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
