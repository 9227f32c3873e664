package rules_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// TestNewReportsEveryField: New reports every bad field of every rule, the
// tier assignments' and the overrides', in that order (each rule's in the
// order of its fields), and keeps reading after a bad one.
func TestNewReportsEveryField(t *testing.T) {
	lim := core.PerMinute(10)
	pos := func(line int) rules.Position { return rules.Position{File: "db", Line: line} }
	_, err := rules.New("r", []*rules.Rule{
		{ID: "a b", Dimension: "user", Limit: core.Limit{Algorithm: core.GCRA, Period: time.Second}, Tiers: map[string]core.Limit{" ": lim, "pro": {}}, Source: pos(1)},
		{ID: rules.PolicyAdminRead, Dimension: "bad dim", Endpoints: []string{"/ok"}, Limit: lim, Source: pos(2)},
		{ID: "c", Dimension: "user", Endpoints: []string{"x", "/ok", "y"}, Deny: true, Tiers: map[string]core.Limit{"pro": lim}, Source: pos(3)},
		nil,
		{ID: "c", Dimension: "user", Unlimited: true, Limit: lim, Source: pos(5)},
		{ID: "e", Domain: "d", Envoy: &rules.EnvoyNode{}, Limit: core.Limit{}, Source: pos(6)},
	}, map[string]map[string]string{"b c": {"x": "pro"}, "user": {"y": ""}},
		rules.Override{RuleID: "nope", Dimension: "user", Identifier: "ann", Until: time.Now()})
	require.Error(t, err)
	want := []string{
		`db:1: rule "a b": name: `,
		`db:1: rule "a b": limit: must be at least 1`,
		`db:1: rule "a b": tiers: a tier needs a name`,
		`db:1: rule "a b": tiers.pro.algorithm: `,
		`db:2: rule "admin_read": name: `,
		`db:2: rule "admin_read": dimension: only a-z`,
		`db:3: rule "c": deny: a deny rule has rate 0 and no tiers`,
		`db:3: rule "c": endpoint_pattern: pattern "x"`,
		`db:3: rule "c": endpoint_pattern: pattern "y"`,
		`rules: rule 3: nil`,
		`db:5: rule "c": name: duplicate rule name (first at db:3)`,
		`db:5: rule "c": unlimited: an unlimited rule has no limit`,
		`db:6: rule "e": algorithm: `,
		`db:6: rule "e": descriptors: an Envoy rule needs a descriptor path`,
		`rules: tier_assignments.b c: only a-z`,
		`rules: tier_assignments.user.y: empty tier`,
		`rules: overrides[0].rule_id: no rule "nope"`,
	}
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, len(want), err.Error())
	for i, w := range want {
		require.Contains(t, lines[i], w, "error %d", i)
	}
}
