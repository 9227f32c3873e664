package rulesdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ReadRules decodes a JSON array of rules (the admin API's shape; unknown
// fields are refused). A rule without "enabled" is enabled.
func ReadRules(r io.Reader) ([]Rule, error) {
	var raw []json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("rulesdb: rules: want a JSON array of rules: %w", err)
	}
	out := make([]Rule, 0, len(raw))
	for i, m := range raw {
		r := Rule{Enabled: true}
		d := json.NewDecoder(bytes.NewReader(m))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil {
			return nil, fmt.Errorf("rulesdb: rules[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// WriteRules encodes rules as the indented JSON array ReadRules reads.
func WriteRules(w io.Writer, rs []*Rule) error {
	if rs == nil {
		rs = []*Rule{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// Import creates or replaces each rule of rs (rules without a tier first,
// so that tiered rows find their base), each write with its own audit row.
// It stops at the first refusal and returns how many rules were written.
func (d *DB) Import(ctx context.Context, actor string, rs []Rule) (int, error) {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b Rule) int {
		switch {
		case a.Tier == "" && b.Tier != "":
			return -1
		case a.Tier != "" && b.Tier == "":
			return 1
		}
		return 0
	})
	for i, r := range rs {
		r.ETag, r.Revision = "", 0
		_, err := d.Update(ctx, actor, r, "*")
		if errors.Is(err, ErrNotFound) {
			_, err = d.Create(ctx, actor, r)
		}
		if err != nil {
			return i, err
		}
	}
	return len(rs), nil
}

// All returns every stored rule, in ID order.
func (d *DB) All(ctx context.Context) ([]*Rule, error) {
	return loadRules(ctx, d.db)
}
