package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// served is what a ratelimitd's /metrics exposes: each series name (a
// histogram's _bucket, _sum and _count) with the values of each of its
// labels.
type served map[string]map[string]map[string]bool

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// parseExposition reads a /metrics body.
func parseExposition(body string) (served, error) {
	tp := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	s := served{}
	add := func(name string, ls map[string]string) {
		if s[name] == nil {
			s[name] = map[string]map[string]bool{}
		}
		for k, v := range ls {
			if s[name][k] == nil {
				s[name][k] = map[string]bool{}
			}
			s[name][k][v] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetHistogram() != nil:
				add(name+"_sum", ls)
				add(name+"_count", ls)
				for _, b := range m.GetHistogram().GetBucket() {
					add(name+"_bucket", mergeLabel(ls, "le", fmt.Sprint(b.GetUpperBound())))
				}
				add(name+"_bucket", mergeLabel(ls, "le", "+Inf"))
			case m.GetSummary() != nil:
				add(name+"_sum", ls)
				add(name+"_count", ls)
				add(name, ls)
			default:
				add(name, ls)
			}
		}
	}
	return s, nil
}

func mergeLabel(ls map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range ls {
		out[a] = b
	}
	return out
}

// grafanaVars are the dashboard's macros and variables, given values that
// keep an expression's meaning for the parser.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// plainAlternation is a regular expression of literal alternatives
// (a|b|c), whose values can be checked one by one.
var plainAlternation = regexp.MustCompile(`^[A-Za-z0-9_.:/ -]+(\|[A-Za-z0-9_.:/ -]+)*$`)

// checkExpr parses a PromQL expression and checks that every metric it
// selects is served (or is one of extra: names recorded by rules, or
// Prometheus's own up), that every label it matches or groups by is one
// those series carry (or a target label), and that every value it matches
// exactly, or as a plain alternation, is one they take.
func checkExpr(expr string, s served, extra []string) error {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return err
	}
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, checkSelector(n, s, extra))
		case *parser.AggregateExpr:
			if !n.Without {
				errs = append(errs, checkGrouping(n, s))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

// selectorName is the metric name a selector selects.
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

func checkSelector(vs *parser.VectorSelector, s served, extra []string) error {
	name := selectorName(vs)
	if slices.Contains(extra, name) {
		return nil
	}
	ls, ok := s[name]
	if !ok {
		return fmt.Errorf("%s: not served by ratelimitd", vs)
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || slices.Contains(targetLabels, m.Name) {
			continue
		}
		values, ok := ls[m.Name]
		if !ok {
			return fmt.Errorf("%s: %s has no label %q", vs, name, m.Name)
		}
		var want []string
		switch {
		case strings.Contains(m.Value, "$"):
		case m.Type == labels.MatchEqual:
			want = []string{m.Value}
		case m.Type == labels.MatchRegexp && plainAlternation.MatchString(m.Value):
			want = strings.Split(m.Value, "|")
		}
		for _, v := range want {
			if !values[v] {
				return fmt.Errorf("%s: %s{%s} never takes %q (served: %v)", vs, name, m.Name, v, keys(values))
			}
		}
	}
	return nil
}

// checkGrouping checks that each label of a "by" is carried by some served
// series the aggregation reads (recorded series are taken on trust).
func checkGrouping(a *parser.AggregateExpr, s served) error {
	var names []string
	parser.Inspect(a.Expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, selectorName(vs))
		}
		return nil
	})
	for _, l := range a.Grouping {
		if slices.Contains(targetLabels, l) {
			continue
		}
		found := false
		for _, n := range names {
			_, rec := s[n]
			found = found || !rec || s[n][l] != nil
		}
		if !found {
			return fmt.Errorf("%s: by (%s): no series it reads (%v) has that label", a, l, names)
		}
	}
	return nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard:
// its panels' targets (rows' panels included) and its query variables
// (label_values(SELECTOR, label) gives SELECTOR).
func dashboardExprs(t *testing.T, data []byte) map[string]string {
	t.Helper()
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	out := map[string]string{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			require.False(t, ids[p.ID], "panel id %d twice", p.ID)
			ids[p.ID] = true
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
				require.NotEmpty(t, p.Description, "panel %q says what it shows", p.Title)
			}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q target %s", p.Title, tg.RefID)
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			require.NoError(t, json.Unmarshal(v.Query, &q.Query), "variable %s", v.Name)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: want label_values(SELECTOR, label), got %q", v.Name, q.Query)
		out["variable "+v.Name] = m[1]
	}
	return out
}

type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"`
	Targets     []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// ruleGroups are the rule files' groups, as far as the expressions go
// (promtool checks the rest).
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertExprs returns the expressions of deploy/prometheus's rules, by
// rule, and the names its recording rules record.
func alertExprs(t *testing.T) (map[string]string, []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("prometheus", "ratelimitd.rules.yaml"))
	require.NoError(t, err)
	var g ruleGroups
	require.NoError(t, yaml.Unmarshal(data, &g))
	out := map[string]string{}
	var recorded []string
	for _, gr := range g.Groups {
		for _, r := range gr.Rules {
			out[gr.Name+"/"+r.Record+r.Alert] = r.Expr
			if r.Record != "" {
				recorded = append(recorded, r.Record)
			}
		}
	}
	return out, recorded
}

// TestExprCheckerCatches: the checker refuses what a typo makes: a metric
// ratelimitd does not serve, a label it does not carry, a value it never
// takes (exactly or in an alternation), a grouping label no series has,
// and an expression that does not parse.
func TestExprCheckerCatches(t *testing.T) {
	s := served{
		"ratelimitd_decisions_total": {"policy": {"p": true}, "outcome": {"allowed": true, "denied": true}},
		"ratelimitd_component_up":    {"component": {"store": true}},
	}
	for _, ok := range []string{
		`sum by (policy) (rate(ratelimitd_decisions_total{outcome="denied", job=~"$job"}[$__rate_interval]))`,
		`ratelimitd_component_up{component="store"} == 0`,
		`ratelimitd_decisions_total{outcome=~"allowed|denied"}`,
		`{__name__="ratelimitd_component_up"}`,
	} {
		require.NoError(t, checkExpr(ok, s, nil), ok)
	}
	for _, bad := range []string{
		`rate(ratelimitd_decision_total[5m])`,
		`ratelimitd_component_up{componnent="store"}`,
		`ratelimitd_component_up{component="stroe"}`,
		`ratelimitd_decisions_total{outcome=~"allowed|denyed"}`,
		`sum by (polcy) (ratelimitd_decisions_total)`,
		`sum(rate(ratelimitd_decisions_total[5m])`,
		`{__name__="ratelimitd_nope"}`,
	} {
		require.Error(t, checkExpr(bad, s, nil), bad)
	}
}
