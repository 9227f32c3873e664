package rules_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/rules"
)

// TestEnvoyErrorsOfEachBlock: every part of an Envoy file that can be
// wrong on its own (a descriptor's key, its list, a rate_limit block and
// its replaces) is reported naming its field and line, the rest of the
// file read on.
func TestEnvoyErrorsOfEachBlock(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"top not a mapping", "- 1\n", []string{`e.yaml:1: `}},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", []string{`e.yaml:2: descriptors: must be a list of descriptors`}},
		{"nested not a list", "domain: d\ndescriptors:\n  - key: a\n    descriptors: 3\n", []string{`e.yaml:4: descriptors[0].descriptors: must be a list of descriptors`}},
		{"descriptor not a mapping", "domain: d\ndescriptors:\n  - 7\n  - key: b\n    bad: 1\n", []string{`e.yaml:3: descriptors[0]`, `e.yaml:5: descriptors[1].bad`}},
		{"empty key", "domain: d\ndescriptors:\n  - key: \"\"\n", []string{`e.yaml:3: descriptors[0].key: required: descriptor has empty key`}},
		{"key not a string", "domain: d\ndescriptors:\n  - key: [a]\n  - key: b\n    bad: 1\n", []string{`e.yaml:3: descriptors[0].key`, `e.yaml:5: descriptors[1].bad`}},
		{"value not a string", "domain: d\ndescriptors:\n  - key: a\n    value: {b: c}\n", []string{`e.yaml:4: descriptors[0].value`}},
		{"rate_limit not a mapping", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", []string{`e.yaml:4: descriptors[0].rate_limit`}},
		{"no requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n", []string{`e.yaml:4: descriptors[0].rate_limit.requests_per_unit: required`}},
		{"unlimited with a limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 1, burst: 2}\n", []string{
			`e.yaml:4: descriptors[0].rate_limit.requests_per_unit: an unlimited rate_limit has no limit`,
			`e.yaml:4: descriptors[0].rate_limit.burst: an unlimited rate_limit has no limit`,
		}},
		{"replaces not a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: me}\n", []string{`e.yaml:4: descriptors[0].rate_limit.replaces: must be a list of {name: NAME}`}},
		{"replaces entry not a mapping", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [x, {name: \"\"}]\n", []string{
			`e.yaml:7: descriptors[0].rate_limit.replaces[0]`,
			`e.yaml:7: descriptors[0].rate_limit.replaces[1].name: should not have an empty replaces entry`,
		}},
		{"invalid limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 100000000, algorithm: sliding_window_log}\n", []string{`e.yaml:4: descriptors[0].rate_limit.requests_per_unit: sliding_window_log keeps one entry per event`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rules.Parse("e.yaml", []byte(c.file))
			require.Error(t, err)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}

	// A limit is checked once the rest of its block is good.
	_, err := rules.Parse("e.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: [x], burst: 5}\n"))
	require.ErrorContains(t, err, `e.yaml:4: descriptors[0].rate_limit.name: must be a string`)
	require.NotContains(t, err.Error(), "burst")
}
