package rules_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

func TestNew(t *testing.T) {
	lim := core.PerMinute(10)
	s, err := rules.New("rev1", []*rules.Rule{
		{ID: "a", Dimension: "user", Endpoints: []string{"/x/**"}, Limit: lim, Tiers: map[string]core.Limit{"pro": core.PerMinute(100)}},
		{ID: "b", Domain: "d", Envoy: &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: "k"}}}, Limit: lim.WithAlgorithm(core.FixedWindow)},
		{ID: "c", Domain: "d", Envoy: &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: "k", Value: "v"}}}, Unlimited: true},
	}, map[string]map[string]string{"user": {"ann": "pro"}})
	require.NoError(t, err)
	require.Equal(t, "rev1", s.Revision())
	require.Equal(t, []string{"a"}, names(s.Match("", "user", "/x/y")))
	r, id, ok := s.MatchDescriptor("d", e("k", "w"))
	require.True(t, ok)
	require.Equal(t, "b", r.ID)
	require.Equal(t, "d|k=w", id)
	r, _, ok = s.MatchDescriptor("d", e("k", "v"))
	require.True(t, ok)
	require.True(t, r.Unlimited)
	require.Equal(t, "pro", s.TierOf("user", "ann"))
}

func TestNewErrors(t *testing.T) {
	lim := core.PerMinute(10)
	envoy := func(k, v string) *rules.EnvoyNode {
		return &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: k, Value: v}}}
	}
	pos := rules.Position{File: "db", Line: 3}
	for _, c := range []struct {
		name  string
		rules []*rules.Rule
		tiers map[string]map[string]string
		want  string
	}{
		{"bad id", []*rules.Rule{{ID: "a b", Dimension: "user", Limit: lim, Source: pos}}, nil, `rules: db:3: rule "a b": name: only a-z`},
		{"duplicate", []*rules.Rule{{ID: "a", Dimension: "user", Limit: lim}, {ID: "a", Dimension: "ip", Limit: lim}}, nil, `rule "a": name: duplicate rule name`},
		{"bad limit", []*rules.Rule{{ID: "a", Dimension: "user", Limit: core.Limit{Algorithm: core.GCRA, Rate: 0, Period: time.Second}}}, nil, `rule "a": limit: must be at least 1, got 0`},
		{"bad tier", []*rules.Rule{{ID: "a", Dimension: "user", Limit: lim, Tiers: map[string]core.Limit{"pro": {}}}}, nil, `rule "a": tiers.pro.algorithm: unknown algorithm 0`},
		{"no dimension", []*rules.Rule{{ID: "a", Limit: lim}}, nil, `rule "a": dimension: required`},
		{"bad endpoint", []*rules.Rule{{ID: "a", Dimension: "user", Endpoints: []string{"x"}, Limit: lim}}, nil, `rule "a": endpoint_pattern: pattern "x" must start with /`},
		{"unlimited with a limit", []*rules.Rule{{ID: "a", Envoy: envoy("k", ""), Unlimited: true, Limit: lim}}, nil, `rule "a": unlimited: an unlimited rule has no limit`},
		{"same envoy path", []*rules.Rule{{ID: "a", Domain: "d", Envoy: envoy("k", "v"), Limit: lim}, {ID: "b", Domain: "d", Envoy: envoy("k", "v"), Limit: lim}}, nil, `rule "b": descriptors: duplicate descriptor d.k_v (rule "a"`},
		{"empty envoy path", []*rules.Rule{{ID: "a", Envoy: &rules.EnvoyNode{}, Limit: lim}}, nil, `rule "a": descriptors: an Envoy rule needs a descriptor path`},
		{"empty tier", []*rules.Rule{{ID: "a", Dimension: "user", Limit: lim}}, map[string]map[string]string{"user": {"x": ""}}, `tier_assignments.user.x: empty tier`},
		{"deny with a rate", []*rules.Rule{{ID: "a", Envoy: envoy("k", ""), Deny: true, Limit: lim}}, nil, `rule "a": deny: a deny rule has rate 0 and no tiers`},
		{"deny and unlimited", []*rules.Rule{{ID: "a", Envoy: envoy("k", ""), Deny: true, Unlimited: true}}, nil, `rule "a": unlimited: a rule cannot be both unlimited and deny`},
		{"nil rule", []*rules.Rule{nil}, nil, `rule 0: nil`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := rules.New("r", c.rules, c.tiers)
			require.Nil(t, s)
			require.ErrorContains(t, err, c.want)
			if c.name == "nil rule" {
				return
			}
			// The field, and the rule when the refusal is of one, are typed.
			var fe *core.FieldError
			require.ErrorAs(t, err, &fe)
			var re *rules.RuleError
			if errors.As(err, &re) {
				require.Contains(t, err.Error(), fmt.Sprintf("rule %q: %s: %s", re.ID, fe.Field, fe.Message))
			} else {
				require.Contains(t, err.Error(), fe.Error())
			}
		})
	}
}
