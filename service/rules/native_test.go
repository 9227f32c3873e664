package rules_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

const nativeFile = `rules:
  - name: orders-per-user
    dimension: user
    endpoint_pattern: [/api/v1/orders, /api/v1/orders/*]
    algorithm: sliding_window_counter
    limit: 100
    window_seconds: 60
    tiers: {pro: {limit: 1000, window_seconds: 60}}
  - name: api-per-user
    dimension: user
    endpoint_pattern: [/api/**]
    limit: 10
    window_seconds: 1
    burst: 20
  - name: any-per-user
    dimension: user
    limit: 5000
    window_seconds: 3600
    shadow: true
  - name: per-ip
    dimension: ip
    limit: 50
    window_seconds: 1
  - name: partner-orders
    domain: partners
    dimension: user
    limit: 7
    window_seconds: 60
tier_assignments:
  user: {alice: pro}
`

func names(rs []*rules.Rule) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestParseNative(t *testing.T) {
	s, err := rules.Parse("r.yaml", []byte(nativeFile))
	require.NoError(t, err)
	require.Len(t, s.Revision(), 12)
	require.Equal(t, []string{"orders-per-user", "api-per-user", "any-per-user", "per-ip", "partner-orders"}, names(s.Rules()))
	require.WithinDuration(t, time.Now(), s.LoadedAt(), time.Minute)

	r, ok := s.Rule("orders-per-user")
	require.True(t, ok)
	require.Equal(t, core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 100, Period: time.Minute}, r.Limit)
	require.Equal(t, map[string]core.Limit{"pro": {Algorithm: core.TokenBucket, Rate: 1000, Period: time.Minute}}, r.Tiers)
	require.Equal(t, rules.Position{File: "r.yaml", Line: 2}, r.Source)
	require.Equal(t, "user", r.Dimension)
	r, _ = s.Rule("api-per-user")
	require.Equal(t, core.Limit{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, r.Limit)
	r, _ = s.Rule("any-per-user")
	require.True(t, r.Shadow)
	_, ok = s.Rule("nope")
	require.False(t, ok)

	require.Equal(t, "pro", s.TierOf("user", "alice"))
	require.Equal(t, "", s.TierOf("user", "bob"))
	require.Equal(t, "", s.TierOf("ip", "alice"))

	// The same content has the same revision; another has another.
	s2, err := rules.Parse("other.yaml", []byte(nativeFile))
	require.NoError(t, err)
	require.Equal(t, s.Revision(), s2.Revision())
	s3, err := rules.Parse("r.yaml", []byte(strings.Replace(nativeFile, "limit: 50", "limit: 51", 1)))
	require.NoError(t, err)
	require.NotEqual(t, s.Revision(), s3.Revision())
}

func TestMatch(t *testing.T) {
	s, err := rules.Parse("r.yaml", []byte(nativeFile))
	require.NoError(t, err)
	for _, c := range []struct {
		domain, dim, endpoint string
		want                  []string
	}{
		{"", "user", "/api/v1/orders", []string{"orders-per-user", "api-per-user", "any-per-user"}},
		{"", "user", "/api/v1/orders/42", []string{"orders-per-user", "api-per-user", "any-per-user"}},
		{"", "user", "/api/v1/orders/42/items", []string{"api-per-user", "any-per-user"}},
		{"", "user", "/api", []string{"api-per-user", "any-per-user"}},
		{"", "user", "/apix", []string{"any-per-user"}},
		{"", "user", "", []string{"any-per-user"}},
		{"", "ip", "/anything", []string{"per-ip"}},
		{"", "ip", "", []string{"per-ip"}},
		{"", "api_key", "/api/v1/orders", []string{}},
		{"partners", "user", "/api/v1/orders", []string{"partner-orders"}},
		{"partners", "ip", "/x", []string{}},
		{"nope", "user", "/api", []string{}},
	} {
		require.Equal(t, c.want, names(s.Match(c.domain, c.dim, c.endpoint)), "%+v", c)
		pre := &rules.Rule{ID: "before"}
		got := s.AppendMatch([]*rules.Rule{pre}, c.domain, c.dim, c.endpoint)
		require.Equal(t, append([]string{"before"}, c.want...), names(got), "AppendMatch %+v", c)
	}
	// A buffer the rules fit in: no allocation.
	var buf [4]*rules.Rule
	for _, ep := range []string{"/api/v1/orders/42", "", "/apix"} {
		require.Zero(t, testing.AllocsPerRun(100, func() { _ = s.AppendMatch(buf[:0], "", "user", ep) }), ep)
	}
}

func TestMatchManyRules(t *testing.T) {
	// More rules than Match's stack buffer holds.
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 100 {
		b.WriteString("  - {name: r" + strconv.Itoa(i) + ", dimension: user, limit: 1, window_seconds: 1, endpoint_pattern: [/p" + strconv.Itoa(i%10) + "/**]}\n")
	}
	s, err := rules.Parse("many.yaml", []byte(b.String()))
	require.NoError(t, err)
	got := names(s.Match("", "user", "/p3/x"))
	require.Len(t, got, 10)
	require.Equal(t, "r3", got[0])
	require.Equal(t, "r93", got[9])
	require.Equal(t, got, names(s.AppendMatch(make([]*rules.Rule, 0, 2), "", "user", "/p3/x")), "a buffer too small grows")
}

// A rule's lease_seconds is its Lease, and rules.New refuses a Lease
// that cannot be (a sliding window log's, a tier's; a rule counting
// nothing), naming the field.
func TestNativeLease(t *testing.T) {
	s, err := rules.Parse("r.yaml", []byte("rules:\n  - {name: global, dimension: all, algorithm: fixed_window, limit: 500000, window_seconds: 1, lease_seconds: 0.25}\n"))
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, s.Rules()[0].Lease)
	log := core.Per(5, time.Second).WithAlgorithm(core.SlidingWindowLog)
	for _, r := range []*rules.Rule{
		{ID: "a", Dimension: "user", Limit: log, Lease: time.Second},
		{ID: "a", Dimension: "user", Limit: core.PerSecond(5), Tiers: map[string]core.Limit{"gold": log}, Lease: time.Second},
		{ID: "a", Dimension: "user", Unlimited: true, Lease: time.Second},
	} {
		_, err := rules.New("r", []*rules.Rule{r}, nil)
		require.ErrorContains(t, err, "lease_seconds", "%+v", r)
	}
}

func TestParseNativeErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []string // each must appear in the error
	}{
		{"unknown field", "rules:\n  - name: a\n    dimension: user\n    limit: 1\n    window_seconds: 1\n    colour: 3\n",
			[]string{"r.yaml:6: rules[0].colour: unknown field (known: name, dimension, endpoint_pattern, algorithm, limit, window_seconds, burst, tiers, shadow, lease_seconds, domain)"}},
		{"lease of a log", "rules:\n  - name: a\n    dimension: user\n    limit: 1\n    window_seconds: 1\n    algorithm: sliding_window_log\n    lease_seconds: 0.1\n",
			[]string{"r.yaml:7: rules[0].lease_seconds: sliding_window_log cannot be leased"}},
		{"bad lease", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1, lease_seconds: 0}\n",
			[]string{"r.yaml:2: rules[0].lease_seconds: must be a positive number of seconds"}},
		{"unknown top-level", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1}\npolicies: []\n",
			[]string{"r.yaml:3: policies: unknown field (known: rules, tier_assignments)"}},
		{"no rules", "tier_assignments: {}\n", []string{"r.yaml:1: rules: at least one rule is required"}},
		{"missing fields", "rules:\n  - name: a\n", []string{
			"r.yaml:2: rules[0].dimension: required",
			"r.yaml:2: rules[0].limit: required",
			"r.yaml:2: rules[0].window_seconds: required",
		}},
		{"bad name", "rules:\n  - {name: a b, dimension: user, limit: 1, window_seconds: 1}\n",
			[]string{`r.yaml:2: rules[0].name: only a-z A-Z 0-9 _ . : - allowed, got "a b"`}},
		{"duplicate name", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1}\n  - {name: a, dimension: ip, limit: 1, window_seconds: 1}\n",
			[]string{`r.yaml:3: rules[1].name: duplicate rule name "a" (first at line 2)`}},
		{"bad dimension", "rules:\n  - {name: a, dimension: 'us er', limit: 1, window_seconds: 1}\n",
			[]string{`r.yaml:2: rules[0].dimension: only a-z A-Z 0-9 _ . : - allowed`}},
		{"bad route", "rules:\n  - name: a\n    dimension: user\n    limit: 1\n    window_seconds: 1\n    endpoint_pattern: [/ok, api, /a/**/b]\n",
			[]string{`r.yaml:6: rules[0].endpoint_pattern[1]: pattern "api" must start with /`, `r.yaml:6: rules[0].endpoint_pattern[2]: pattern "/a/**/b": ** must be the last segment`}},
		{"bad algorithm", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1, algorithm: leaky}\n",
			[]string{`r.yaml:2: rules[0].algorithm: unknown algorithm "leaky" (token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra)`}},
		{"bad numbers", "rules:\n  - {name: a, dimension: user, limit: 1.5, window_seconds: 0, burst: -1}\n",
			[]string{`r.yaml:2: rules[0].limit: must be a whole number >= 1, got "1.5"`, `r.yaml:2: rules[0].window_seconds: must be a positive number of seconds`, `r.yaml:2: rules[0].burst: must be a whole number >= 0, got "-1"`}},
		{"core validation", "rules:\n  - {name: a, dimension: user, limit: 10, window_seconds: 1, algorithm: fixed_window, burst: 20}\n",
			[]string{`r.yaml:2: rules[0].burst: fixed_window has no burst: leave it 0, got 20`}},
		{"core validation rate", "rules:\n  - name: a\n    dimension: user\n    algorithm: sliding_window_log\n    limit: 70000\n    window_seconds: 1\n",
			[]string{`r.yaml:5: rules[0].limit: sliding_window_log keeps one entry per event: at most 65536, got 70000`}},
		{"bad tier", "rules:\n  - name: a\n    dimension: user\n    limit: 1\n    window_seconds: 1\n    tiers:\n      pro: {limit: 0, window_seconds: 1}\n      gold: {window_seconds: 1, extra: 1}\n",
			[]string{`r.yaml:7: rules[0].tiers.pro.limit: must be a whole number >= 1, got "0"`, `r.yaml:8: rules[0].tiers.gold.extra: unknown field (known: algorithm, limit, window_seconds, burst)`, `r.yaml:8: rules[0].tiers.gold.limit: required`}},
		{"unknown tier assignment", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1, tiers: {pro: {limit: 2, window_seconds: 1}}}\ntier_assignments:\n  user:\n    alice: gold\n  ip: {1.2.3.4: pro}\n",
			[]string{`r.yaml:5: tier_assignments.user.alice: unknown tier "gold" (known: pro)`, `r.yaml:6: tier_assignments.ip.1.2.3.4: unknown tier "pro" (no rule of dimension ip has tiers)`}},
		{"bad shadow", "rules:\n  - {name: a, dimension: user, limit: 1, window_seconds: 1, shadow: yes please}\n",
			[]string{`r.yaml:2: rules[0].shadow: must be true or false, got "yes please"`}},
		{"not a mapping", "- a\n- b\n", []string{"r.yaml:1: file: must be a mapping"}},
		{"yaml syntax", "rules: [\n", []string{"rules file r.yaml:1: not valid YAML: "}},
		{"empty", "", []string{"rules file r.yaml: empty file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := rules.Parse("r.yaml", []byte(c.file))
			require.Error(t, err)
			require.Nil(t, s)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				require.True(t, strings.HasPrefix(line, "rules file r.yaml"), "every error names the file: %q", line)
			}
		})
	}
}

func TestParseMaxBytes(t *testing.T) {
	_, err := rules.Parse("r.yaml", []byte(nativeFile), rules.WithMaxBytes(10))
	require.ErrorContains(t, err, "larger than 10 bytes")
	_, err = rules.Parse("r.yaml", []byte(nativeFile), rules.WithMaxRules(2))
	require.ErrorContains(t, err, "r.yaml:2: rules: 5 rules, more than the limit of 2")
}
