package main

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/propbench"
	"github.com/sluicehq/sluice/bench/rulesbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// fakeRules is a rules-at-scale section whose check takes ns10 with 10
// rules and ns100k with 100k (each run of a size alike but the first, 5%
// faster).
func fakeRules(ns10, ns100k float64) *rulesSection {
	sec := &rulesSection{count: 3, d: 200 * time.Millisecond}
	for _, n := range rulesbench.Sizes {
		ns := ns10
		if n == 100_000 {
			ns = ns100k
		}
		r := rulesRow{n: n, build: rulesbench.BuildSample{N: n, Snapshot: time.Duration(n) * time.Microsecond, Engine: 2 * time.Duration(n) * time.Microsecond, SnapshotHeap: float64(400 * n), EngineHeap: float64(550 * n)},
			load: []time.Duration{3 * time.Millisecond}, update: time.Millisecond}
		for i := range 3 {
			f := 1.0
			if i == 0 {
				f = 0.95
			}
			r.runs = append(r.runs, rulesbench.CheckSample{Checks: 1000, Ns: ns * f, Allocs: 15, Byte: 4600})
		}
		r.med = rulesbench.CheckSample{Ns: ns, Allocs: 15, Byte: 4600}
		r.best, r.spread = 0.95*ns, 0.05
		sec.rows = append(sec.rows, r)
	}
	return sec
}

func TestRulesTarget(t *testing.T) {
	tg := fakeRules(1000, 1050).target()
	require.True(t, tg.met)
	require.InDelta(t, 1.05, tg.ratio, 1e-9)
	require.Contains(t, tg.measured, "1050 ns/check vs 1000 ns/check")

	tg = fakeRules(1000, 1500).target()
	require.False(t, tg.met)
	require.False(t, tg.close, "100k's best run (1425) is above 1.10 × 10's median")

	sec := fakeRules(1000, 1050)
	sec.rows[2] = rulesRow{n: 100_000, failed: "boom"}
	require.Equal(t, "not measured", sec.target().verdict())
	require.Empty(t, sec.chartRows())
}

func TestRulesMarkdown(t *testing.T) {
	r := fakeReport(90)
	r.rules = fakeRules(1000, 1050)
	r.rules.rows[1].dbError = "disk full"
	var b bytes.Buffer
	r.write(&b)
	md := b.String()
	for _, want := range []string{
		"## ratelimitd: rules at scale", "spread over 4 dimensions (user, ip, api_key, tenant)",
		"| 100000 | 1050 | 5% | 998 | 1.05× | 15.0 | 4600 | 100 ms | 200 ms | 40.0 MB | 55.0 MB | 3 ms | 1 ms |",
		"| 1000 | 1000 |", "FAILED: disk full",
		"with 100k rules within 1.10× of 10 rules", "| 1.05× | ≤ 1.10× | **met (runs overlap)** |",
	} {
		require.Contains(t, md, want)
	}
}

// fakeChurn is a rule churn section: none at base checks/s and p99 p,
// churn at f × base and g × p; the database pair alike.
func fakeChurn(base float64, p time.Duration, f, g float64) *ruleChurnSection {
	sec := &ruleChurnSection{opts: serviceOptions{count: 2, measure: 3 * time.Second, callers: 64}}
	for i := range sec.rows {
		perSec, p99 := base, p
		if churnRows[i].churn {
			perSec, p99 = f*base, time.Duration(g*float64(p))
			sec.churn[i] = []servicebench.ChurnResult{{Written: 3, Applied: 2}, {Written: 3, Applied: 3}}
		}
		sec.rows[i] = serviceRow{impl: servicebench.ChurnImpl(), samples: []servicebench.Sample{{PerSec: perSec}}, perSec: perSec, best: perSec, p99: p99, p50: p99 / 4, p999: 2 * p99, serverUs: 30}
	}
	return sec
}

func TestRuleChurnTargets(t *testing.T) {
	ts := fakeChurn(20_000, 10*time.Millisecond, 0.95, 1.1).targets()
	require.Len(t, ts, 4)
	for _, tg := range ts {
		require.True(t, tg.met, tg.name)
	}
	require.InDelta(t, 0.95, ts[0].ratio, 1e-9)
	require.Contains(t, ts[0].why, "6 rule changes written, 5 applied")
	require.Contains(t, ts[2].name, "SQLite rules database")

	ts = fakeChurn(20_000, 10*time.Millisecond, 0.8, 1.5).targets()
	require.False(t, ts[0].met)
	require.False(t, ts[1].met)

	sec := fakeChurn(20_000, 10*time.Millisecond, 1, 1)
	sec.rows[3] = serviceRow{failed: "database locked"}
	ts = sec.targets()
	require.Equal(t, "not measured", ts[2].verdict())
	require.Contains(t, ts[2].missing, "database locked")
	require.True(t, ts[0].met, "the file pair stands alone")
}

func TestRuleChurnMarkdown(t *testing.T) {
	r := fakeReport(90)
	r.ruleChurn = fakeChurn(20_000, 10*time.Millisecond, 0.95, 1.1)
	var b bytes.Buffer
	r.write(&b)
	md := b.String()
	for _, want := range []string{
		"## ratelimitd: decisions while rules change",
		"| rules file, ShouldRateLimit, Redis: one change per second | 19000 |",
		"| SQLite database, CheckRateLimit, memory store: no change | 20000 |",
		"rules file 6 written, 5 applied; database 6 written, 5 applied",
	} {
		require.Contains(t, md, want)
	}
}

func TestPropagationTargets(t *testing.T) {
	sec := &propSection{changes: 4, res: propbench.Result{Via: propbench.ViaAPI,
		Delays: []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond, 400 * time.Millisecond},
		Writes: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}}}
	ts := sec.targets()
	require.Len(t, ts, 2)
	require.True(t, ts[0].met)
	require.InDelta(t, 0.4, ts[0].ratio, 1e-9)
	require.True(t, ts[1].met)
	require.InDelta(t, 0.03, ts[1].ratio, 1e-9)
	require.Contains(t, ts[0].why, "PUT /api/v1/rules/{id}")

	sec.res.Delays[3] = 1500 * time.Millisecond
	require.False(t, sec.targets()[0].met)

	r := fakeReport(90)
	r.prop = sec
	var b bytes.Buffer
	r.write(&b)
	require.Contains(t, b.String(), "| write's response → first decision under the new limit on B | 4 | 3 ms | 1.5 s | 1.5 s | 1.5 s |")

	sec.bigRules, sec.bigChanges = 100_000, 2
	sec.big = propbench.Result{Delays: []time.Duration{300 * time.Millisecond, 700 * time.Millisecond}, Writes: []time.Duration{400 * time.Millisecond, 500 * time.Millisecond}}
	b.Reset()
	r.write(&b)
	require.Contains(t, b.String(), "| with 100k rules stored: write's response → first decision on B | 2 | 300 ms | 700 ms | 700 ms | 700 ms |")
	require.Contains(t, b.String(), "| with 100k rules stored: the write itself | 2 | 400 ms |")
	require.True(t, sec.targets()[1].met, "the targets are the first cluster's")

	failed := &propSection{changes: 100, err: errors.New("no postgres")}
	require.Equal(t, "not measured", failed.targets()[0].verdict())
	require.Empty(t, failed.chartRows())
}
