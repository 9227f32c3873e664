package config_test

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

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/internal/rulefile/rulefiletest"
	"github.com/sluicehq/sluice/keyfunc"
)

// spelling says, per renamed field, whether a policy writes its old name.
type spelling struct{ rate, period, routes bool }

func limitYAML(l core.Limit, sp spelling) []string {
	return rulefiletest.LimitYAML(l, rulefiletest.Old{Rate: sp.rate, Period: sp.period})
}

// policyYAML writes p (its key "header:X-User") as one item of policies:,
// spelled per sp, with the same lines whatever the spelling.
func policyYAML(p core.Policy, sp spelling) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    key: header:X-User\n", p.Name)
	for _, kv := range limitYAML(p.Limit, sp) {
		fmt.Fprintf(&b, "    %s\n", kv)
	}
	if len(p.Match.Routes) > 0 || len(p.Match.Methods) > 0 {
		b.WriteString("    match:\n")
		if len(p.Match.Methods) > 0 {
			fmt.Fprintf(&b, "      methods: [%s]\n", strings.Join(p.Match.Methods, ", "))
		}
		key := "endpoint_pattern"
		if sp.routes {
			key = "routes"
		}
		if len(p.Match.Routes) > 0 {
			fmt.Fprintf(&b, "      %s: [%s]\n", key, strings.Join(p.Match.Routes, ", "))
		}
	}
	if len(p.Tiers) > 0 {
		b.WriteString("    tiers:\n")
		for _, name := range []string{"gold", "pro"} {
			if l, ok := p.Tiers[name]; ok {
				fmt.Fprintf(&b, "      %s: {%s}\n", name, strings.Join(limitYAML(l, sp), ", "))
			}
		}
	}
	fmt.Fprintf(&b, "    shadow: %t\n", p.Shadow)
	refund := map[core.RefundWhen]string{core.RefundNever: "never", core.RefundFailed: "failed", core.RefundSuccessful: "successful"}
	fmt.Fprintf(&b, "    refund: %s\n", refund[p.Refund])
	return b.String()
}

// withoutKeys returns ps with their key functions cleared, to compare the
// rest (key functions are compared by what they return).
func withoutKeys(ps []core.Policy) []core.Policy {
	out := make([]core.Policy, len(ps))
	for i, p := range ps {
		p.Key = nil
		out[i] = p
	}
	return out
}

// TestOldAndNewSpellingsLoadTheSame: a file spelling any of its fields by
// their old names (rate, period, match.routes; in a policy or a tier)
// loads as the same policies as the file in today's names, for every
// algorithm, field and mix of spellings, and a Limiter takes them; only
// the old file has a deprecation notice (File.Deprecated, and logged).
func TestOldAndNewSpellingsLoadTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 2))
	routes := [][]string{nil, {"/api/**"}, {"/api/v1/orders", "/users/:id"}}
	var ps []core.Policy
	for i, name := range core.AlgorithmNames() {
		a, err := core.ParseAlgorithm(name)
		require.NoError(t, err)
		for j := range 4 {
			p := core.Policy{Name: fmt.Sprintf("%s-%d", name, j), Limit: rulefiletest.RandomLimit(rng, a), Shadow: j%2 == 1,
				Refund: core.RefundWhen(j % 3)}
			p.Match.Routes = routes[(i+j)%3]
			if j == 1 {
				p.Match.Methods = []string{"GET", "POST"}
			}
			if j >= 2 {
				other, _ := core.ParseAlgorithm(core.AlgorithmNames()[(i+j)%6])
				p.Tiers = map[string]core.Limit{"gold": rulefiletest.RandomLimit(rng, a), "pro": rulefiletest.RandomLimit(rng, other)}
			}
			ps = append(ps, p)
		}
	}
	file := func(choose func(i int) spelling) string {
		var b strings.Builder
		b.WriteString("policies:\n")
		for i, p := range ps {
			b.WriteString(policyYAML(p, choose(i)))
		}
		return b.String()
	}
	parse := func(doc string) (*config.File, string) {
		var log bytes.Buffer
		f, err := config.ParseFile("p.yaml", []byte(doc), config.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		require.NoError(t, err, doc)
		return f, log.String()
	}
	want, logged := parse(file(func(int) spelling { return spelling{} }))
	require.Empty(t, logged)
	require.Empty(t, want.Deprecated)
	require.Equal(t, ps, withoutKeys(want.Policies))
	store, err := memorystore.New()
	require.NoError(t, err)
	defer store.Close()
	tiering := core.Tiering{Key: keyfunc.Header("X-User"), Resolve: func(context.Context, string) (string, error) { return "gold", nil }}
	_, err = core.NewLimiter(store, want.Policies, core.WithTiering(tiering))
	require.NoError(t, err)

	all := spelling{rate: true, period: true, routes: true}
	for name, mix := range map[string]func(int) spelling{
		"all old":     func(int) spelling { return all },
		"rate only":   func(int) spelling { return spelling{rate: true} },
		"period only": func(int) spelling { return spelling{period: true} },
		"routes only": func(int) spelling { return spelling{routes: true} },
		"random": func(int) spelling {
			return spelling{rate: rng.IntN(2) == 0, period: rng.IntN(2) == 0, routes: rng.IntN(2) == 0}
		},
	} {
		got, logged := parse(file(mix))
		require.Equal(t, ps, withoutKeys(got.Policies), name)
		req := &keyfunc.Static{Headers: map[string][]string{"X-User": {"ann"}}}
		for i := range got.Policies {
			w, _ := want.Policies[i].Key(req)
			g, _ := got.Policies[i].Key(req)
			require.Equal(t, w, g)
		}
		require.NotEmpty(t, got.Deprecated, name)
		require.Equal(t, 1, strings.Count(logged, "level=WARN"), "%s: %s", name, logged)
		require.Contains(t, logged, got.Deprecated)
	}
	f, _ := parse(file(func(int) spelling { return all }))
	require.True(t, strings.HasPrefix(f.Deprecated, "config: p.yaml: deprecated field names, still read with the same meaning: rate (line 5 and "), f.Deprecated)
	for _, s := range []string{"is now limit", "period (line 6 and ", "is now window_seconds", "routes (line ", "is now endpoint_pattern"} {
		require.Contains(t, f.Deprecated, s)
	}
}

// TestOldFileLoadsAsBefore: the documented example in the old names, YAML
// 1.1's yes included, loads as the same policies as in today's.
func TestOldFileLoadsAsBefore(t *testing.T) {
	quiet := config.WithLogger(nil)
	now, err := config.ParseFile("limits.yaml", []byte(good), quiet)
	require.NoError(t, err)
	before, err := config.ParseFile("limits.yaml", []byte(goodBefore), quiet)
	require.NoError(t, err)
	require.Equal(t, withoutKeys(now.Policies), withoutKeys(before.Policies))
	req := &keyfunc.Static{Headers: map[string][]string{"X-Api-Key": {"secret"}, "X-User": {"ann"}}}
	for i := range now.Policies {
		a, errA := now.Policies[i].Key(req)
		b, errB := before.Policies[i].Key(req)
		require.Equal(t, a, b)
		require.Equal(t, errA, errB)
	}
	require.Empty(t, now.Deprecated)
	require.Equal(t, "config: limits.yaml: deprecated field names, still read with the same meaning: "+
		"rate (line 8 and 3 more) is now limit, period (line 9 and 3 more) is now window_seconds, "+
		"hash: yes (line 12) is now hash: true, routes (line 18) is now endpoint_pattern, "+
		"shadow: yes (line 28) is now shadow: true", before.Deprecated)
}

// TestMixedSpellingsRefused: a mapping that gives one field under its old
// and its new name is refused, naming both, in a policy, its match and a
// tier.
func TestMixedSpellingsRefused(t *testing.T) {
	cases := append(rulefiletest.MixedSpellings("policies", "key: ip"), rulefiletest.Mixed{
		Doc:  "policies:\n  - name: a\n    key: ip\n    limit: 5\n    window_seconds: 1\n    match: {routes: [/a], endpoint_pattern: [/a]}\n",
		Want: ":6: policies[0].match.endpoint_pattern: endpoint_pattern and routes (line 6) are one field, routes its deprecated name: give it once, as endpoint_pattern",
	})
	for _, c := range cases {
		_, err := config.Parse("p.yaml", []byte(c.Doc))
		require.ErrorContains(t, err, "config: p.yaml"+c.Want, c.Doc)
	}
}

// TestDeprecationNoticeOncePerRead: Load logs a file's notice once; Watch
// once at start and once per changed content it puts in force, not for a
// file that fails.
func TestDeprecationNoticeOncePerRead(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(doc string) { rulefiletest.Replace(t, path, doc) }
	write("policies:\n  - {name: a, key: ip, rate: 1, period: 1s}\n")
	_, err := config.Load(path, config.WithLogger(logger))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(log.String(), "level=WARN"), log.String())

	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	l, err := core.NewLimiter(s, []core.Policy{{Name: "boot", Key: keyfunc.Const("x"), Limit: core.PerSecond(1)}})
	require.NoError(t, err)
	reloads := make(chan error, 10)
	w, err := config.Watch(path, l, config.Every(time.Millisecond), config.WithFileOptions(config.WithLogger(logger)),
		config.OnReload(func(err error) { reloads <- err }))
	require.NoError(t, err)
	defer w.Close()
	require.Equal(t, 2, strings.Count(log.String(), "level=WARN"), log.String())
	write("policies:\n  - {name: a, key: ip, rate: -1, period: 1s}\n")
	require.ErrorContains(t, <-reloads, "policies[0].rate: must be a whole number")
	write("policies:\n  - {name: a, key: ip, limit: 2, window_seconds: 1}\n")
	require.NoError(t, <-reloads)
	write("policies:\n  - {name: a, key: ip, rate: 3, period: 1s}\n")
	require.NoError(t, <-reloads)
	require.NoError(t, w.Close())
	require.Equal(t, 3, strings.Count(log.String(), "level=WARN"), log.String())
}

// TestErrorsDeepInAFileNameTheirLine: an error in the 41st policy of 60 is
// reported at its own line, whether the YAML is broken or a field is.
func TestErrorsDeepInAFileNameTheirLine(t *testing.T) {
	for name, b := range rulefiletest.BrokenItems("key: ip") {
		doc, line := rulefiletest.DeepFile("policies", "key: ip", 60, 40, b)
		_, err := config.Parse("deep.yaml", []byte(doc))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), fmt.Sprintf("config: deep.yaml:%d: ", line), "%s:\n%v", name, err)
		require.Equal(t, 1, strings.Count(err.Error(), "\n")+1, "%s: one error: %v", name, err)
	}
}

// TestMissingFileSaysSo: a missing file is one error naming it once.
func TestMissingFileSaysSo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	_, err := config.Load(missing)
	require.EqualError(t, err, "config: "+missing+": no such file or directory")
	require.ErrorIs(t, err, os.ErrNotExist)
}
