package rules_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rulefile/rulefiletest"
	"github.com/sluicehq/sluice/service/rules"
)

// spelling says, per renamed field, whether a rule writes its old name.
type spelling struct{ rate, period, endpoints bool }

// vocabRule is one rule of the spelling tests, written under any spelling.
type vocabRule struct {
	name, dimension, domain string
	limit                   core.Limit
	endpoints               []string // nil: none; one: written as a string
	tiers                   map[string]core.Limit
	shadow                  bool
}

func limitYAML(l core.Limit, sp spelling) []string {
	return rulefiletest.LimitYAML(l, rulefiletest.Old{Rate: sp.rate, Period: sp.period})
}

// yaml writes r as one item of rules:, its fields spelled per sp; the
// layout (and so every line) is the same whatever the spelling.
func (r vocabRule) yaml(sp spelling) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    dimension: %s\n", r.name, r.dimension)
	if r.domain != "" {
		fmt.Fprintf(&b, "    domain: %s\n", r.domain)
	}
	key := "endpoint_pattern"
	if sp.endpoints {
		key = "endpoints"
	}
	switch len(r.endpoints) {
	case 0:
	case 1:
		fmt.Fprintf(&b, "    %s: %s\n", key, r.endpoints[0])
	default:
		fmt.Fprintf(&b, "    %s: [%s]\n", key, strings.Join(r.endpoints, ", "))
	}
	for _, kv := range limitYAML(r.limit, sp) {
		fmt.Fprintf(&b, "    %s\n", kv)
	}
	if len(r.tiers) > 0 {
		b.WriteString("    tiers:\n")
		for _, name := range []string{"gold", "pro"} {
			if l, ok := r.tiers[name]; ok {
				fmt.Fprintf(&b, "      %s: {%s}\n", name, strings.Join(limitYAML(l, sp), ", "))
			}
		}
	}
	fmt.Fprintf(&b, "    shadow: %t\n", r.shadow)
	return b.String()
}

// TestOldAndNewSpellingsReadTheSame: a file spelling any of its fields by
// their old names (rate, period, endpoints; in a rule or a tier) reads as
// the same rules as the file in today's names, for every algorithm, field
// and mix of spellings; only the old file has a deprecation notice.
func TestOldAndNewSpellingsReadTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	endpoints := [][]string{nil, {"/api/**"}, {"/api/v1/orders", "/users/:id"}}
	var rs []vocabRule
	for i, name := range core.AlgorithmNames() {
		a, err := core.ParseAlgorithm(name)
		require.NoError(t, err)
		for j := range 4 {
			r := vocabRule{
				name: fmt.Sprintf("%s-%d", name, j), dimension: []string{"user", "ip", "api_key"}[j%3],
				limit: rulefiletest.RandomLimit(rng, a), endpoints: endpoints[(i+j)%3], shadow: j%2 == 1,
			}
			if j == 3 {
				r.domain = "partners"
			}
			if j >= 2 {
				other, _ := core.ParseAlgorithm(core.AlgorithmNames()[(i+j)%6])
				r.tiers = map[string]core.Limit{"gold": rulefiletest.RandomLimit(rng, a), "pro": rulefiletest.RandomLimit(rng, other)}
			}
			rs = append(rs, r)
		}
	}
	file := func(choose func(i int) spelling) string {
		var b strings.Builder
		b.WriteString("rules:\n")
		for i, r := range rs {
			b.WriteString(r.yaml(choose(i)))
		}
		return b.String()
	}
	parse := func(doc string) (*rules.Snapshot, string) {
		var log bytes.Buffer
		s, err := rules.Parse("r.yaml", []byte(doc), rules.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err, doc)
		return s, log.String()
	}
	want, notice := parse(file(func(int) spelling { return spelling{} }))
	require.Empty(t, notice, "today's names: no notice")
	require.Len(t, want.Rules(), len(rs))
	for i, r := range want.Rules() {
		require.Equal(t, rs[i].limit, r.Limit, r.ID)
		require.Equal(t, rs[i].tiers, r.Tiers, r.ID)
		if len(rs[i].endpoints) > 0 {
			require.Equal(t, rs[i].endpoints, r.Endpoints, r.ID)
		}
	}
	all := spelling{rate: true, period: true, endpoints: true}
	mixes := map[string]func(int) spelling{
		"all old":        func(int) spelling { return all },
		"rate only":      func(int) spelling { return spelling{rate: true} },
		"period only":    func(int) spelling { return spelling{period: true} },
		"endpoints only": func(int) spelling { return spelling{endpoints: true} },
		"random": func(int) spelling {
			return spelling{rate: rng.IntN(2) == 0, period: rng.IntN(2) == 0, endpoints: rng.IntN(2) == 0}
		},
	}
	for name, mix := range mixes {
		got, notice := parse(file(mix))
		require.Equal(t, want.Rules(), got.Rules(), name)
		require.Equal(t, want.TierOf("user", "x"), got.TierOf("user", "x"))
		require.Equal(t, 1, strings.Count(notice, "level=WARN"), "%s: one notice for the file: %s", name, notice)
	}
	_, notice = parse(file(func(int) spelling { return all }))
	for _, old := range []string{"rate (line 5 and ", "is now limit", "period (line 6 and ", "is now window_seconds", "endpoints (line ", "is now endpoint_pattern"} {
		require.Contains(t, notice, old)
	}
}

// TestMixedSpellingsRefused: a mapping that gives one field under its old
// and its new name is refused, naming both, in a rule and in a tier.
func TestMixedSpellingsRefused(t *testing.T) {
	cases := append(rulefiletest.MixedSpellings("rules", "dimension: user"), rulefiletest.Mixed{
		Doc:  "rules:\n  - name: a\n    dimension: user\n    endpoints: [/a]\n    limit: 5\n    window_seconds: 1\n    endpoint_pattern: /b\n",
		Want: ":7: rules[0].endpoint_pattern: endpoint_pattern and endpoints (line 4) are one field, endpoints its deprecated name: give it once, as endpoint_pattern",
	})
	for _, c := range cases {
		_, err := rules.Parse("r.yaml", []byte(c.Doc))
		require.ErrorContains(t, err, "rules file r.yaml"+c.Want, c.Doc)
	}
}

// TestDeprecationNoticeOnce: a file in the old names is logged once each
// time its content is read (Load, then a changed file under Watch), never
// for a file that fails, and never for today's names.
func TestDeprecationNoticeOnce(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(doc string) { rulefiletest.Replace(t, path, doc) }
	write("rules:\n  - {name: a, dimension: user, rate: 1, period: 1s}\n")
	src := rules.NewFile(path, rules.WithLogger(logger), rules.WithPollInterval(time.Millisecond))
	_, err := src.Load(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(log.String(), "level=WARN"), log.String())
	require.Contains(t, log.String(), path+": deprecated field names, still read with the same meaning: rate (line 2) is now limit, period (line 2) is now window_seconds")

	w := watch(t, src)
	write("rules:\n  - {name: a, dimension: user, rate: -1, period: 1s}\n")
	require.ErrorContains(t, <-w.errs, "rules[0].rate: must be a whole number")
	write("rules:\n  - {name: a, dimension: user, limit: 2, window_seconds: 1}\n")
	<-w.snaps
	write("rules:\n  - {name: a, dimension: user, rate: 3, period: 1s}\n")
	<-w.snaps
	require.Equal(t, 2, strings.Count(log.String(), "level=WARN"), "the first file, then the last: %s", log.String())
}

// TestErrorsDeepInAFileNameTheirLine: an error in the 41st rule of 60 is
// reported at its own line, whether the YAML is broken (an item indented
// one space too few or too many, a tab, an unclosed list, a stray item) or
// a field is (unknown, a bad value, a mixed spelling, a core refusal).
func TestErrorsDeepInAFileNameTheirLine(t *testing.T) {
	for name, b := range rulefiletest.BrokenItems("dimension: user") {
		doc, line := rulefiletest.DeepFile("rules", "dimension: user", 60, 40, b)
		_, err := rules.Parse("deep.yaml", []byte(doc))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), fmt.Sprintf("rules file deep.yaml:%d: ", line), "%s:\n%v", name, err)
		require.Equal(t, 1, strings.Count(err.Error(), "\n")+1, "%s: one error: %v", name, err)
	}
}

// TestMissingRulesFileSaysSo: a missing or unreadable file is one error
// under one prefix, "rules file NAME: ...", through the engine's Load as
// directly; errors.Is finds the cause.
func TestMissingRulesFileSaysSo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	_, err := rules.NewFile(missing).Load(context.Background())
	require.EqualError(t, err, "rules file "+missing+": no such file or directory")
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = rules.NewFile(dir).Load(context.Background())
	require.EqualError(t, err, "rules directory "+dir+": no *.yaml or *.yml file in it")
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("#"), 20), 0o600))
	_, err = rules.NewFile(big, rules.WithMaxBytes(10)).Load(context.Background())
	require.EqualError(t, err, "rules file "+big+": the file is larger than 10 bytes (see WithMaxBytes)")
}
