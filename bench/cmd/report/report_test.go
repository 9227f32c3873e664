package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		check   func(*testing.T, options)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, o options) {
			require.Equal(t, 5, o.count)
			require.Equal(t, "", o.out)
			require.Empty(t, o.quickDefaults)
		}},
		{name: "quick lowers what is not set", args: []string{"-quick", "-count", "4"}, check: func(t *testing.T, o options) {
			require.Equal(t, 4, o.count, "an explicit flag wins")
			require.Equal(t, 100*time.Millisecond, o.benchtime)
			require.Equal(t, 1, o.redisCount)
			require.NotContains(t, o.quickDefaults, "count")
			require.Contains(t, o.quickDefaults, "benchtime")
		}},
		{name: "out", args: []string{"-out", "../docs"}, check: func(t *testing.T, o options) {
			require.Equal(t, "../docs", o.out)
			require.Equal(t, []string{"-out", "../docs"}, o.args)
		}},
		{name: "bad count", args: []string{"-count", "0"}, wantErr: true},
		{name: "too few identities", args: []string{"-rediskeys", "10"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlagsQuiet(tt.args)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			tt.check(t, o)
		})
	}
}

// parseFlagsQuiet parses without printing the usage on errors.
func parseFlagsQuiet(args []string) (options, error) {
	return parseFlagsTo(io.Discard, args)
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name, scenarios, impls string
		wantErr                bool
		check                  func(*testing.T, selection)
	}{
		{name: "hot selects both hot-key scenarios", scenarios: "hot", impls: "sluice,xrate", check: func(t *testing.T, s selection) {
			require.Equal(t, []string{"HotKeySerial", "HotKeyParallel"}, scenarioNames(s.mem))
			require.Len(t, s.memImpls, 2)
			require.False(t, s.mw || s.fiber || s.redis || s.rdMem || s.churn)
		}},
		{name: "report order whatever the token order", scenarios: "heap,hotkeyserial", impls: "default", check: func(t *testing.T, s selection) {
			require.Equal(t, []string{"HotKeySerial", "HeapPerKey"}, scenarioNames(s.mem))
		}},
		{name: "middleware selects both tables, baseline kept", scenarios: "middleware", impls: "ulule", check: func(t *testing.T, s selection) {
			require.True(t, s.mw && s.fiber)
			require.Equal(t, []string{"bare", "ulule"}, mwNames(s.mwImpls))
			require.Equal(t, []string{"bare"}, mwNames(s.fiberImpls))
		}},
		{name: "fiber only", scenarios: "fiber", impls: "fiber", check: func(t *testing.T, s selection) {
			require.False(t, s.mw)
			require.Equal(t, []string{"bare", "fiber", "fiber-sliding"}, mwNames(s.fiberImpls))
		}},
		{name: "default leaves out most unpipelined variants", scenarios: "redis64", impls: "default", check: func(t *testing.T, s selection) {
			var names []string
			for _, im := range s.rdImpls {
				names = append(names, im.Name)
			}
			require.Contains(t, names, "sluice-token_bucket-nopipe")
			require.NotContains(t, names, "sluice-gcra-nopipe")
			require.Contains(t, names, "throttled")
			require.Contains(t, names, "redis-benchmark-P16")
			require.False(t, s.rdMem)
		}},
		{name: "all keeps them", scenarios: "redis64", impls: "all", check: func(t *testing.T, s selection) {
			require.Len(t, s.rdImpls, len(redisbench.Impls()))
		}},
		{name: "memory scenario has no ceilings", scenarios: "redismemory", impls: "all", check: func(t *testing.T, s selection) {
			for _, im := range s.rdMemImpls {
				require.NotEqual(t, redisbench.Ceiling, im.Kind)
				require.False(t, strings.HasSuffix(im.Name, "-nopipe"))
			}
		}},
		{name: "churn alone, sluice only", scenarios: "churn", impls: "default", check: func(t *testing.T, s selection) {
			require.True(t, s.churn)
			require.Empty(t, s.mem)
			require.False(t, s.mw || s.fiber || s.redis || s.rdMem)
		}},
		{name: "churn skipped without sluice", scenarios: "churn,hot", impls: "xrate", check: func(t *testing.T, s selection) {
			require.False(t, s.churn)
		}},
		{name: "all selects churn", scenarios: "all", impls: "default", check: func(t *testing.T, s selection) {
			require.True(t, s.churn)
		}},
		{name: "service alone", scenarios: "service", impls: "default", check: func(t *testing.T, s selection) {
			require.Len(t, s.svcImpls, len(servicebench.Impls())-len(servicebench.TuningImpls()), "default leaves out the tuning variants")
			for _, im := range s.svcImpls {
				require.False(t, im.Tuning, im.Name)
			}
			require.Empty(t, s.mem)
			require.False(t, s.mw || s.fiber || s.redis || s.rdMem || s.churn)
		}},
		{name: "ratelimitd selects its variants", scenarios: "service", impls: "ratelimitd", check: func(t *testing.T, s selection) {
			require.NotEmpty(t, s.svcImpls)
			for _, im := range s.svcImpls {
				require.Equal(t, servicebench.Ratelimitd, im.Server)
			}
		}},
		{name: "the tuning variants by name", scenarios: "service", impls: "envoy-ratelimit-best,envoy-ratelimit-tune", check: func(t *testing.T, s selection) {
			require.Len(t, s.svcImpls, 1+len(servicebench.TuningImpls()))
			require.Equal(t, "envoy-ratelimit-best", s.svcImpls[0].Name)
		}},
		{name: "all runs the tuning variants", scenarios: "service", impls: "all", check: func(t *testing.T, s selection) {
			require.Len(t, s.svcImpls, len(servicebench.Impls()))
		}},
		{name: "redis does not select the service", scenarios: "redis", impls: "default", check: func(t *testing.T, s selection) {
			require.Empty(t, s.svcImpls)
		}},
		{name: "unknown scenario", scenarios: "nosuch", impls: "all", wantErr: true},
		{name: "impl absent from the scenarios", scenarios: "hot", impls: "redis_rate", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := selectAll(options{scenarios: tt.scenarios, impls: tt.impls})
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			tt.check(t, s)
		})
	}
}

func mwNames(ims []mwImpl) []string {
	var out []string
	for _, im := range ims {
		out = append(out, im.Name)
	}
	return out
}

// fakeReport is a report with made-up results in every area.
func fakeReport(sluiceNs float64) *report {
	scs := membench.Scenarios()
	impls := membench.Impls()
	mem := &memSection{scs: []membench.Scenario{scs[0], scs[4]}}
	for _, sc := range mem.scs {
		for i, im := range impls {
			ns := 100 + 10*float64(i)
			if !im.Peer {
				ns = sluiceNs
			}
			mem.rows = append(mem.rows, row{sc: sc, impl: im, runs: 3, med: sample{ns: ns, bytes: 40 + float64(i)}, bestNs: ns * 0.95})
		}
	}
	mw := &mwSection{scenario: middlewareScenario, rows: []mwRow{
		{impl: mwImpl{Name: "bare", Baseline: true}, runs: 3, med: sample{ns: 20}},
		{impl: mwImpl{Name: "sluice"}, runs: 3, med: sample{ns: 220, allocs: 1}, bestNs: 210},
		{impl: mwImpl{Name: "httprate", Peer: true}, runs: 3, med: sample{ns: 420, allocs: 10}, bestNs: 400},
	}}
	row := func(name string, kind redisbench.Kind, perSec float64) redisRow {
		return redisRow{impl: redisbench.Impl{Name: name, Kind: kind}, samples: make([]redisbench.Sample, 1), perSec: perSec, best: perSec * 1.05}
	}
	rd := &redisSection{rows: []redisRow{
		row(defaultSluice, redisbench.Sluice, 50_000),
		row("ulule", redisbench.Peer, 40_000),
		row("redis_rate", redisbench.Peer, 30_000),
		row("redis-benchmark", redisbench.Ceiling, 55_000),
		row("redis-benchmark-P16", redisbench.Ceiling, 150_000),
	}}
	return &report{opts: options{out: "x", count: 3, heapCount: 1, benchtime: time.Second, heapKeys: 1000}, mem: mem, mw: mw, redis: rd}
}

func TestTargets(t *testing.T) {
	byName := func(ts []target, prefix string) target {
		for _, t := range ts {
			if strings.HasPrefix(t.name, prefix) {
				return t
			}
		}
		t.Fatalf("no target %q", prefix)
		return target{}
	}
	ts := fakeReport(90).targets()
	require.Len(t, ts, 5, "hot key (the heap has no target), net/http, Redis peers, two ceilings")
	hot := byName(ts, "in memory, hot key, serial")
	require.True(t, hot.met)
	require.InDelta(t, 90.0/110, hot.ratio, 1e-9)
	require.Contains(t, hot.measured, "xrate")
	mw := byName(ts, "net/http")
	require.True(t, mw.met)
	require.InDelta(t, 200.0/400, mw.ratio, 1e-9)
	peer := byName(ts, "Redis, 64 callers: sluice's store (token bucket")
	require.True(t, peer.met)
	require.InDelta(t, 1.25, peer.ratio, 1e-9)
	var ceilings []target
	for _, t := range ts {
		if strings.Contains(t.name, "ceiling") {
			ceilings = append(ceilings, t)
		}
	}
	require.Len(t, ceilings, 2)
	require.True(t, ceilings[0].met, "50k ≥ 0.8 × 55k")
	require.False(t, ceilings[1].met, "50k < 0.8 × 150k")
	require.Equal(t, "not met", ceilings[1].verdict())

	slow := byName(fakeReport(112).targets(), "in memory, hot key, serial")
	require.False(t, slow.met)
	require.True(t, slow.close, "sluice's best run (106.4) beat the peer's median (110)")
	require.Equal(t, "not met (runs overlap)", slow.verdict())
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	r := fakeReport(90)
	r.write(&b)
	md := b.String()
	for _, want := range []string{
		"## Targets", "## Machine and versions", "## Commands", "### Hot key, serial", "### Heap per key (1k keys)",
		"## HTTP middleware overhead (net/http)", "## Redis: decisions per second", "![", svgName,
		"| **`sluice`** | 90.0 |", "0.82× (vs xrate)",
	} {
		require.Contains(t, md, want)
	}
	requireTables(t, md)
}

// requireTables checks that every table row has as many cells as its
// header.
func requireTables(t *testing.T, md string) {
	t.Helper()
	lines := strings.Split(md, "\n")
	for i := 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "|---") {
			want := strings.Count(lines[i], "|")
			for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
				require.Equal(t, want, strings.Count(lines[j], "|")-strings.Count(lines[j], "\\|"), "line %d: %s", j+1, lines[j])
			}
		}
	}
}

func TestChart(t *testing.T) {
	rows := []bar{
		{group: "in memory", label: "hot key", value: 1.2, target: 1, note: "vs xrate"},
		{group: "in memory", label: "heap", value: 3, note: "vs sethvargo <bytes>"},
		{group: "Redis", label: "ceiling", value: 0.5, target: 0.8, note: "vs redis-benchmark"},
		{group: "Redis", label: "huge", value: 1000, target: 1, note: "clipped"},
	}
	var b bytes.Buffer
	writeChart(&b, rows, "a & b")
	svg := b.String()
	// Well-formed XML.
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
	}
	require.Contains(t, svg, "a &amp; b")
	require.Contains(t, svg, "&lt;bytes&gt;")
	require.Equal(t, 4+3, strings.Count(svg, "<rect ")-1, "one bar per row, three legend swatches, one background")
	require.Equal(t, 2, strings.Count(svg, `fill="`+colorMet+`"`)-1, "hot key and huge are met (and the legend)")
	require.Equal(t, 1, strings.Count(svg, `fill="`+colorMissed+`"`)-1)
	require.Equal(t, 1, strings.Count(svg, `fill="`+colorInfo+`"`)-1)
	require.Contains(t, svg, "1000.00× clipped", "the label gives the true value even when the bar is clipped")
	require.Contains(t, svg, ">32×<", "the scale stops at 2^5")
}
