package rulesdb

import (
	"bytes"
	"encoding/json"
)

// FieldChange is one member of an audit entry's before or after object
// whose value the change set, changed or removed.
type FieldChange struct {
	// Field is the member's name ("limit").
	Field string `json:"field"`
	// Before and After are its values as stored (JSON); absent (nil) on
	// the side without the member: a creation has no Before, a removal
	// no After.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Changes returns what e changed, member by member: every member of its
// before and after objects whose value differs (compared as compacted
// JSON), in before's order, then the members only after has, in its
// order. ok is false when before or after is not a JSON object (nor
// absent or null).
func (e AuditEntry) Changes() (changes []FieldChange, ok bool) {
	before, okB := members(e.Before)
	after, okA := members(e.After)
	if !okB || !okA {
		return nil, false
	}
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
		changes = append(changes, FieldChange{Field: name, Before: b, After: a})
	}
	for _, m := range before {
		add(m.name)
	}
	for _, m := range after {
		add(m.name)
	}
	return changes, true
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
