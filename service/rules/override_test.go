package rules_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

func overrideRules() []*rules.Rule {
	return []*rules.Rule{
		{ID: "orders", Dimension: "user", Endpoints: []string{"/orders"}, Limit: core.PerMinute(10)},
		{ID: "per-ip", Dimension: "ip", Limit: core.PerSecond(5)},
		{ID: "envoy", Domain: "d", Envoy: &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: "k"}}}, Limit: core.PerMinute(1)},
	}
}

func TestNewOverrides(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	ovs := []rules.Override{
		{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerMinute(100), Until: until, Revision: 7},
		{RuleID: "orders", Dimension: "user", Identifier: "bob", Until: until, Revision: 8},
		{RuleID: "per-ip", Dimension: "ip", Identifier: "10.0.0.1", Limit: core.PerSecond(1), Until: past},
	}
	s, err := rules.New("r", overrideRules(), nil, ovs...)
	require.NoError(t, err)
	require.Equal(t, ovs, s.Overrides())

	o, ok := s.OverrideOf("orders", "user", "ann")
	require.True(t, ok)
	require.Equal(t, ovs[0], o)
	require.False(t, o.Blocks())
	require.True(t, o.Active(until.Add(-time.Millisecond)))
	require.False(t, o.Active(until))

	o, ok = s.OverrideOf("orders", "user", "bob")
	require.True(t, ok)
	require.True(t, o.Blocks())
	require.Equal(t, int64(8), o.Revision)

	// Expired overrides are kept (the engine ignores them).
	o, ok = s.OverrideOf("per-ip", "ip", "10.0.0.1")
	require.True(t, ok)
	require.False(t, o.Active(time.Now()))

	for _, miss := range [][3]string{
		{"orders", "user", "carl"},
		{"orders", "ip", "ann"},
		{"per-ip", "user", "ann"},
		{"nope", "user", "ann"},
	} {
		_, ok := s.OverrideOf(miss[0], miss[1], miss[2])
		require.False(t, ok, miss)
	}

	// No overrides: none found, Overrides empty.
	s, err = rules.New("r", overrideRules(), nil)
	require.NoError(t, err)
	require.Empty(t, s.Overrides())
	_, ok = s.OverrideOf("orders", "user", "ann")
	require.False(t, ok)
}

func TestNewOverrideErrors(t *testing.T) {
	until := time.Now().Add(time.Hour)
	ok := rules.Override{RuleID: "orders", Dimension: "user", Identifier: "ann", Limit: core.PerMinute(1), Until: until}
	with := func(f func(o *rules.Override)) rules.Override {
		o := ok
		f(&o)
		return o
	}
	for _, c := range []struct {
		name string
		ovs  []rules.Override
		want string
	}{
		{"no rule id", []rules.Override{with(func(o *rules.Override) { o.RuleID = "" })}, "overrides[0].rule_id: required"},
		{"unknown rule", []rules.Override{ok, with(func(o *rules.Override) { o.RuleID = "nope" })}, `overrides[1].rule_id: no rule "nope"`},
		{"envoy rule", []rules.Override{with(func(o *rules.Override) { o.RuleID = "envoy"; o.Dimension = "" })}, `overrides[0].rule_id: rule "envoy" is an Envoy rule`},
		{"wrong dimension", []rules.Override{with(func(o *rules.Override) { o.Dimension = "ip" })}, `overrides[0].dimension: rule "orders" is for dimension "user", got "ip"`},
		{"no identifier", []rules.Override{with(func(o *rules.Override) { o.Identifier = "" })}, "overrides[0].identifier: required"},
		{"long identifier", []rules.Override{with(func(o *rules.Override) { o.Identifier = strings.Repeat("x", 1025) })}, "overrides[0].identifier: must be at most 1024 bytes, got 1025"},
		{"bad limit", []rules.Override{with(func(o *rules.Override) { o.Limit = core.Limit{Algorithm: core.GCRA, Period: time.Second} })}, "overrides[0].limit: must be at least 1, got 0"},
		{"no until", []rules.Override{with(func(o *rules.Override) { o.Until = time.Time{} })}, "overrides[0].until: required"},
		{"duplicate", []rules.Override{ok, with(func(o *rules.Override) { o.Limit = core.Limit{} })}, `overrides[1].identifier: duplicate override of rule "orders" for user "ann" (first at overrides[0])`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := rules.New("r", overrideRules(), nil, c.ovs...)
			require.Nil(t, s)
			require.ErrorContains(t, err, c.want)
		})
	}
	// A 1024-byte identifier is accepted.
	_, err := rules.New("r", overrideRules(), nil, with(func(o *rules.Override) { o.Identifier = strings.Repeat("x", 1024) }))
	require.NoError(t, err)
}

// Overrides come with the snapshot: a temporary limit for one caller of
// one rule, or a block (the zero Limit).
func ExampleSnapshot_OverrideOf() {
	until := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := rules.New("42", []*rules.Rule{
		{ID: "orders", Dimension: "user", Limit: core.PerMinute(10)},
	}, nil,
		rules.Override{RuleID: "orders", Dimension: "user", Identifier: "alice", Limit: core.PerMinute(100), Until: until, Revision: 41},
		rules.Override{RuleID: "orders", Dimension: "user", Identifier: "mallory", Until: until, Revision: 42},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []string{"alice", "mallory", "bob"} {
		o, ok := s.OverrideOf("orders", "user", id)
		switch {
		case !ok:
			fmt.Println(id, "no override")
		case o.Blocks():
			fmt.Println(id, "blocked until", o.Until.Format(time.DateOnly))
		default:
			fmt.Println(id, o.Limit, "until", o.Until.Format(time.DateOnly))
		}
	}
	// Output:
	// alice 100/1m0s token_bucket until 2030-01-01
	// mallory blocked until 2030-01-01
	// bob no override
}
