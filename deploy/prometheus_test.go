package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// ruleTests is what TestAlertRulesPromtool reads of the unit tests: which
// alerts some case expects firing.
type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestAlertRulesPromtool: promtool accepts the rules (check rules) and
// their unit tests pass on synthetic series (test rules); every alert has
// a case where it fires; and promtool does evaluate them: a copy with one
// expectation changed fails.
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool")
	out, code := run(t, "prometheus", promtool, "check", "rules", "ratelimitd.rules.yaml")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "SUCCESS")
	out, code = run(t, "prometheus", promtool, "test", "rules", "ratelimitd.rules_test.yaml")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "SUCCESS")

	data, err := os.ReadFile(filepath.Join("prometheus", "ratelimitd.rules_test.yaml"))
	require.NoError(t, err)
	var tests ruleTests
	require.NoError(t, yaml.Unmarshal(data, &tests))
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	rules, _ := alertExprs(t)
	alerts := 0
	for name := range rules {
		if alert, ok := strings.CutPrefix(name, "ratelimitd.alerts/"); ok {
			alerts++
			require.True(t, fires[alert], "no test case shows %s firing", alert)
		}
	}
	require.GreaterOrEqual(t, alerts, 10)

	dir := t.TempDir()
	rulesFile, err := os.ReadFile(filepath.Join("prometheus", "ratelimitd.rules.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ratelimitd.rules.yaml"), rulesFile, 0o600))
	// The first group of cases alone (the day-long one is slow), with one
	// expectation changed.
	first, _, ok := strings.Cut(string(data), "\n  # Instances that agree")
	require.True(t, ok)
	bad := strings.Replace(first, "summary: ratelimitd a:8080 cannot reach its store (Redis)", "summary: ratelimitd b:8080 cannot reach its store (Redis)", 1)
	require.NotEqual(t, string(data), bad)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(bad), 0o600))
	out, code = run(t, dir, promtool, "test", "rules", "t.yaml")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "RatelimitdStoreDown")
}
