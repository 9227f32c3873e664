package rules_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/service/rules"
)

// FuzzParse feeds both formats' parsers arbitrary bytes: they must never
// panic, a valid result must hold only valid rules, and each error line
// must name the file.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{nativeFile, envoyMessaging, envoyEdge, envoyReplaces, string(rules.Example()),
		"rules: []\n", "domain: d\n", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: '*'\n        share_threshold: true\n        rate_limit: {unit: second, requests_per_unit: 1}\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := rules.Parse("f.yaml", data)
		if err != nil {
			if s != nil {
				t.Fatal("a snapshot with an error")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				// The reader's errors name the file; the snapshot's
				// (package rules) name the rule's position.
				if !strings.HasPrefix(line, "rules file f.yaml") && !strings.HasPrefix(line, "rules: f.yaml:") {
					t.Fatalf("error line without the prefix: %q", line)
				}
			}
			return
		}
		for _, r := range s.Rules() {
			if got, ok := s.Rule(r.ID); !ok || got != r {
				t.Fatalf("rule %q not found by ID", r.ID)
			}
			if !r.Unlimited && !r.Deny {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("rule %q: %v", r.ID, err)
				}
			}
			if r.Envoy != nil {
				entries := make([]rules.Entry, len(r.Envoy.Path))
				for i, l := range r.Envoy.Path {
					entries[i] = rules.Entry{Key: l.Key, Value: strings.ReplaceAll(l.Value, "*", "")}
				}
				// Another rule may take the entries first (a literal
				// sibling before a wildcard); the one found has the depth.
				if got, _, ok := s.MatchDescriptor(r.Domain, entries); ok && len(got.Envoy.Path) != len(entries) {
					t.Fatalf("rule %q reached at depth %d", got.ID, len(entries))
				}
			} else {
				s.Match(r.Domain, r.Dimension, "/a/b")
			}
		}
	})
}
