package rules_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// The shapes of envoyproxy/ratelimit's README examples.
const envoyMessaging = `domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: DAY
      requests_per_unit: 100
`

const envoyEdge = `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 1
  - key: ldap
    rate_limit:
      unlimited: true
  - key: path
    value: /foo/bar
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: path
    value: /foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /f*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 30, name: f-paths}
  - key: path
    value: "*/x"
    rate_limit: {unit: hour, requests_per_unit: 40}
  - key: shadowed
    shadow_mode: true
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    rate_limit: {unit: week, requests_per_unit: 3, algorithm: token_bucket, burst: 6}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: year
    rate_limit: {unit: Year, requests_per_unit: 3}
`

const envoyReplaces = `domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        value: subvalue
        rate_limit:
          requests_per_unit: 300
          unit: second
          replaces:
            - name: bkthomps
            - name: nobody
      - key: subkey
        rate_limit:
          requests_per_unit: 100
          unit: second
          name: bkthomps
  - key: other
    rate_limit: {unit: second, requests_per_unit: 1, name: bkthomps}
`

func e(kv ...string) []rules.Entry {
	var out []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestEnvoyMatchDepth(t *testing.T) {
	s, err := rules.Parse("messaging.yaml", []byte(envoyMessaging))
	require.NoError(t, err)
	require.Len(t, s.Rules(), 2)

	r, id, ok := s.MatchDescriptor("messaging", e("message_type", "marketing", "to_number", "2061111111"))
	require.True(t, ok)
	require.Equal(t, int64(5), r.Limit.Rate)
	require.Equal(t, core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: 24 * time.Hour}, r.Limit)
	require.Equal(t, "messaging|message_type=marketing|to_number=2061111111", id)
	require.Equal(t, "messaging.message_type_marketing.to_number", r.ID)
	require.Equal(t, "messaging", r.Domain)
	require.Equal(t, rules.Position{File: "messaging.yaml", Line: 7}, r.Source)

	// Key alone: one counter per value.
	r, id, ok = s.MatchDescriptor("messaging", e("to_number", "2061111111"))
	require.True(t, ok)
	require.Equal(t, int64(100), r.Limit.Rate)
	require.Equal(t, "messaging|to_number=2061111111", id)
	_, id2, _ := s.MatchDescriptor("messaging", e("to_number", "2062222222"))
	require.NotEqual(t, id, id2)

	// Depth must equal the config's: too short, too long, unknown value/key/domain.
	for _, entries := range [][]rules.Entry{
		e("message_type", "marketing"),
		e("message_type", "marketing", "to_number", "1", "extra", "x"),
		e("message_type", "transactional", "to_number", "1"),
		e("to_number", "1", "message_type", "marketing"),
		e("nope", "1"),
		nil,
	} {
		_, _, ok := s.MatchDescriptor("messaging", entries)
		require.False(t, ok, "%v", entries)
	}
	_, _, ok = s.MatchDescriptor("other", e("to_number", "1"))
	require.False(t, ok)
	// Envoy rules are not native rules.
	require.Empty(t, s.Match("messaging", "to_number", "/"))
}

func TestEnvoyMatchValuesAndWildcards(t *testing.T) {
	s, err := rules.Parse("edge.yaml", []byte(envoyEdge))
	require.NoError(t, err)
	match := func(k, v string) (*rules.Rule, string) {
		r, id, ok := s.MatchDescriptor("edge_proxy_per_ip", e(k, v))
		require.True(t, ok, "%s=%s", k, v)
		return r, id
	}
	// The value first, then the key alone.
	r, _ := match("remote_address", "50.0.0.5")
	require.Equal(t, int64(1), r.Limit.Rate)
	r, _ = match("remote_address", "10.0.0.1")
	require.Equal(t, int64(10), r.Limit.Rate)

	// Literal value before wildcards; wildcards in file order.
	r, id := match("path", "/foo/bar")
	require.Equal(t, int64(7), r.Limit.Rate)
	require.Equal(t, "edge_proxy_per_ip|path=/foo/bar", id)
	r, id = match("path", "/foo/baz")
	require.Equal(t, int64(20), r.Limit.Rate)
	require.Equal(t, "edge_proxy_per_ip|path=/foo/baz", id, "without share_threshold each value counts apart")
	r, id = match("path", "/fa")
	require.Equal(t, int64(30), r.Limit.Rate)
	require.Equal(t, "f-paths", r.ID)
	require.Equal(t, "edge_proxy_per_ip|path=/f*", id, "share_threshold: one counter for every match")
	_, id2 := match("path", "/fb")
	require.Equal(t, id, id2)
	// A * before the end is literal, as in envoyproxy/ratelimit.
	r, _ = match("path", "*/x")
	require.Equal(t, int64(40), r.Limit.Rate)
	require.Equal(t, time.Hour, r.Limit.Period)
	_, _, ok := s.MatchDescriptor("edge_proxy_per_ip", e("path", "/a/x"))
	require.False(t, ok, "no wildcard matches and the key alone has no rule")

	// Unlimited: matches, no limit.
	r, _ = match("ldap", "anyone")
	require.True(t, r.Unlimited)
	require.Equal(t, core.Limit{}, r.Limit)

	// shadow_mode, quota_mode, metrics flags and the algorithm extension.
	r, _ = match("shadowed", "x")
	require.True(t, r.Shadow)
	require.True(t, r.Envoy.QuotaMode)
	require.True(t, r.Envoy.DetailedMetric)
	require.True(t, r.Envoy.ValueToMetric)
	require.Equal(t, core.Limit{Algorithm: core.TokenBucket, Rate: 3, Period: 7 * 24 * time.Hour, Burst: 6}, r.Limit)
	r, _ = match("month", "x")
	require.Equal(t, 30*24*time.Hour, r.Limit.Period)
	r, _ = match("year", "x")
	require.Equal(t, 365*24*time.Hour, r.Limit.Period)
}

func TestEnvoyIdentityEscapes(t *testing.T) {
	s, err := rules.Parse("x.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, entries := range [][]rules.Entry{
		e("a", "x|b=y", "b", "z"),
		e("a", "x", "b", "y|b=z"),
		e("a", `x\`, "b", "z"),
		e("a", "x", "b", `\z`),
	} {
		_, id, ok := s.MatchDescriptor("d", entries)
		require.True(t, ok)
		require.False(t, ids[id], "identity %q is not unique", id)
		ids[id] = true
	}
	_, id, _ := s.MatchDescriptor("d", e("a", "x|b=y", "b", "z"))
	require.Equal(t, `d|a=x\|b\=y|b=z`, id)
}

func TestEnvoyReplacesAndIDs(t *testing.T) {
	s, err := rules.Parse("r.yaml", []byte(envoyReplaces))
	require.NoError(t, err)
	var ids []string
	for _, r := range s.Rules() {
		ids = append(ids, r.ID)
	}
	require.Len(t, ids, 3)
	require.Equal(t, "example4.key_value.subkey_subvalue", ids[0])
	require.Equal(t, "bkthomps", ids[1])
	require.True(t, strings.HasPrefix(ids[2], "bkthomps-"), "a second rule named bkthomps gets a unique ID: %s", ids[2])
	r := s.Rules()[0]
	require.Equal(t, []string{"bkthomps", ids[2], "nobody"}, r.Replaces)
	require.Equal(t, "bkthomps", s.Rules()[2].Envoy.Name)

	// Long paths and names outside the rule-name characters are folded and
	// shortened with a hash, unique and valid.
	long := strings.Repeat("k", 70)
	s, err = rules.Parse("l.yaml", []byte("domain: my domain\ndescriptors:\n  - key: "+long+"\n    value: v1\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: "+long+"\n    value: v2\n    rate_limit: {unit: second, requests_per_unit: 1, name: 'my name'}\n"))
	require.NoError(t, err)
	a, b := s.Rules()[0].ID, s.Rules()[1].ID
	require.NotEqual(t, a, b)
	for _, id := range []string{a, b} {
		require.NoError(t, core.ValidatePolicyName(id), id)
	}
	require.True(t, strings.HasPrefix(a, "my_domain.kkk"), a)
	require.Equal(t, "my_name", b)
}

func TestEnvoyNulls(t *testing.T) {
	// envoyproxy/ratelimit reads an empty field as its zero value.
	s, err := rules.Parse("n.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    value:\n    rate_limit:\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 2}\n"))
	require.NoError(t, err)
	require.Len(t, s.Rules(), 1)
	r, _, ok := s.MatchDescriptor("d", e("a", "x", "b", "y"))
	require.True(t, ok)
	require.Equal(t, int64(2), r.Limit.Rate)
	_, _, ok = s.MatchDescriptor("d", e("a", "x"))
	require.False(t, ok)
}

func TestEnvoyDeny(t *testing.T) {
	// envoyproxy/ratelimit's own example bans a value with requests_per_unit: 0.
	s, err := rules.Parse("ban.yaml", []byte(`domain: d
descriptors:
  - key: bar
    value: banned
    rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}
  - key: bar
    rate_limit: {unit: minute, requests_per_unit: 3}
`))
	require.NoError(t, err)
	r, _, ok := s.MatchDescriptor("d", e("bar", "banned"))
	require.True(t, ok)
	require.True(t, r.Deny)
	require.Equal(t, "banned_limit", r.ID)
	require.Equal(t, core.Limit{Algorithm: core.FixedWindow, Period: time.Minute}, r.Limit)
	r, _, _ = s.MatchDescriptor("d", e("bar", "other"))
	require.False(t, r.Deny)
}

func TestEnvoyErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"empty domain", "domain: \"\"\ndescriptors: []\n", []string{`e.yaml:1: domain: required: the config file cannot have an empty domain`}},
		{"no domain", "descriptors:\n  - key: a\n", []string{`e.yaml:1: domain: required`}},
		{"unknown top key", "domain: d\ndescriptors: []\nfoo: 1\n", []string{`e.yaml:3: foo: unknown field (known: domain, descriptors)`}},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: a\n    unit: second\n", []string{`e.yaml:4: descriptors[0].unit: unknown field (known: key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold)`}},
		{"unknown rate_limit key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, per: 2}\n", []string{`e.yaml:4: descriptors[0].rate_limit.per: unknown field (known: unit, requests_per_unit, unlimited, name, replaces, algorithm, burst)`}},
		{"missing key", "domain: d\ndescriptors:\n  - value: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{`e.yaml:3: descriptors[0].key: required: descriptor has empty key`}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n", []string{`e.yaml:5: descriptors[1]: duplicate descriptor composite key 'd.a_b' (first at line 3)`}},
		{"duplicate nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n", []string{`e.yaml:6: descriptors[0].descriptors[1]: duplicate descriptor composite key 'd.a.b' (first at line 5)`}},
		{"invalid unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", []string{`e.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight' (second, minute, hour, day, week, month, year)`}},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", []string{`e.yaml:4: descriptors[0].rate_limit.unit: required`}},
		{"unit when unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", []string{`e.yaml:4: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`}},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", []string{`e.yaml:4: descriptors[0].rate_limit.requests_per_unit: must be a whole number >= 0, got "-1"`}},
		{"deny with burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0, algorithm: token_bucket, burst: 2}\n", []string{`e.yaml:4: descriptors[0].rate_limit.burst: requests_per_unit 0 denies every request: no burst`}},
		{"null replaces name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: }]\n", []string{`e.yaml:7: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry`}},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: \"\"}]\n", []string{`e.yaml:7: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry`}},
		{"replaces self", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: me\n      replaces: [{name: me}]\n", []string{`e.yaml:8: descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor`}},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fast}\n", []string{`e.yaml:4: descriptors[0].rate_limit.algorithm: unknown algorithm "fast"`}},
		{"fixed window burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n", []string{`e.yaml:4: descriptors[0].rate_limit.burst: fixed_window has no burst: leave it 0, got 5`}},
		{"bad flag", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", []string{`e.yaml:4: descriptors[0].shadow_mode: must be true or false, got "maybe"`}},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", []string{`e.yaml:5: descriptors[0].share_threshold: share_threshold can only be used with wildcard values (ending with '*'), but found key 'a_b'`}},
		{"several", "domain: d\ndescriptors:\n  - key: a\n    bad: 1\n  - key: b\n    rate_limit: {unit: eon, requests_per_unit: 1}\n", []string{`e.yaml:4: descriptors[0].bad`, `e.yaml:6: descriptors[1].rate_limit.unit`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rules.Parse("e.yaml", []byte(c.file))
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestEnvoyDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "messaging.yaml"), []byte(envoyMessaging), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yml"), []byte(envoyEdge), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not rules"), 0o600))
	src := rules.NewFile(dir, rules.WithPollInterval(10*time.Millisecond))
	s, err := src.Load(context.Background())
	require.NoError(t, err)
	_, _, ok := s.MatchDescriptor("messaging", e("to_number", "1"))
	require.True(t, ok)
	_, _, ok = s.MatchDescriptor("edge_proxy_per_ip", e("remote_address", "1"))
	require.True(t, ok)

	w := watch(t, src)
	// A second file for the same domain: an error; the last good stays.
	// (Files are replaced atomically: a half-written file is an error too.)
	write(t, filepath.Join(dir, "again.yaml"), strings.Replace(envoyMessaging, "requests_per_unit: 5", "requests_per_unit: 6", 1))
	err = w.err(t)
	require.ErrorContains(t, err, `domain: duplicate domain "messaging"`)
	require.NoError(t, os.Remove(filepath.Join(dir, "again.yaml")))
	// Back to the rules in force: applied once more (the source is good
	// again), then quiet.
	require.Equal(t, s.Revision(), w.snap(t).Revision())
	w.quiet(t)
	// An edit of one file reloads the whole set.
	write(t, filepath.Join(dir, "messaging.yaml"), strings.Replace(envoyMessaging, "requests_per_unit: 5", "requests_per_unit: 9", 1))
	s = w.snap(t)
	r, _, ok := s.MatchDescriptor("messaging", e("message_type", "marketing", "to_number", "1"))
	require.True(t, ok)
	require.Equal(t, int64(9), r.Limit.Rate)
}

func TestEnvoyShareThresholdNested(t *testing.T) {
	// share_threshold on a wildcard level above the rate_limit: every value
	// matching the pattern shares the counter; the deeper value does not.
	s, err := rules.Parse("s.yaml", []byte(`domain: files
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
`))
	require.NoError(t, err)
	_, a, ok := s.MatchDescriptor("files", e("path", "/files/a", "user", "u1"))
	require.True(t, ok)
	_, b, _ := s.MatchDescriptor("files", e("path", "/files/b", "user", "u1"))
	_, c, _ := s.MatchDescriptor("files", e("path", "/files/b", "user", "u2"))
	require.Equal(t, "files|path=/files/*|user=u1", a)
	require.Equal(t, a, b)
	require.NotEqual(t, a, c)
}

// The identity of a descriptor whose rule takes the entries' values
// escapes \, | and = wherever they are (first, last, in a row, alone, or
// none), over random values: distinct values never share a counter.
func TestEnvoyIdentityEscapesRandom(t *testing.T) {
	s, err := rules.Parse("x.yaml", []byte(`
domain: d
descriptors:
  - key: k
    descriptors:
      - key: u
        rate_limit: {unit: second, requests_per_unit: 1}
`))
	require.NoError(t, err)
	escape := func(v string) string {
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			if c := v[i]; c == '\\' || c == '|' || c == '=' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		return b.String()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = `ab\|=x`
	seen := map[string][2]string{}
	for range 20000 {
		var vals [2]string
		for j := range vals {
			b := make([]byte, rng.IntN(6))
			for k := range b {
				b[k] = alphabet[rng.IntN(len(alphabet))]
			}
			vals[j] = string(b)
		}
		_, id, ok := s.MatchDescriptor("d", e("k", vals[0], "u", vals[1]))
		require.True(t, ok)
		require.Equal(t, "d|k="+escape(vals[0])+"|u="+escape(vals[1]), id)
		if prev, dup := seen[id]; dup {
			require.Equal(t, prev, vals, "two descriptors share %q", id)
		}
		seen[id] = vals
	}
}

// A descriptor whose rule's levels are all literal values (or wildcards
// with share_threshold) names one counter whatever else: its identity is
// the snapshot's, built once, escaped as any other, and matching it
// allocates nothing; a level that takes the descriptor's value builds it.
func TestEnvoyConstantIdentity(t *testing.T) {
	s, err := rules.Parse("x.yaml", []byte(`
domain: d
descriptors:
  - key: a
    value: "x|y"
    descriptors:
      - key: b
        value: "v=w"
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: c
    value: "p*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`))
	require.NoError(t, err)
	for _, c := range []struct {
		entries []rules.Entry
		want    string
		allocs  float64
	}{
		{e("a", "x|y", "b", "v=w"), `d|a=x\|y|b=v\=w`, 0},
		{e("c", "pq"), "d|c=p*", 0},
		{e("c", "pr"), "d|c=p*", 0},
		{e("k", "v1"), "d|k=v1", 1},
	} {
		_, id, ok := s.MatchDescriptor("d", c.entries)
		require.True(t, ok)
		require.Equal(t, c.want, id)
		require.Equal(t, c.allocs, testing.AllocsPerRun(100, func() { _, _, _ = s.MatchDescriptor("d", c.entries) }), c.want)
	}
}
