package promlimit_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/promlimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// newCollector returns a Collector with the default options.
func newCollector(t testing.TB, opts ...promlimit.Option) *promlimit.Collector {
	t.Helper()
	c, err := promlimit.New(opts...)
	require.NoError(t, err)
	return c
}

// newMemory returns a memorystore on a manual clock that never moves, so
// that nothing refills during a test.
func newMemory(t testing.TB) *memorystore.Store {
	t.Helper()
	clk := limitertest.NewClock()
	s, err := memorystore.New(memorystore.WithClock(clk.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// policy is a policy keyed by a constant, so every request of a test is
// one identity.
func policy(name string, lim core.Limit) core.Policy {
	return core.Policy{Name: name, Key: keyfunc.Const("client"), Limit: lim}
}

// check runs n requests through l and returns how many were allowed.
func check(t testing.TB, l *core.Limiter, n int) int {
	t.Helper()
	allowed := 0
	for range n {
		d, err := l.Check(context.Background(), keyfunc.Static{PathName: "/"})
		require.NoError(t, err)
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

// values gathers c through a pedantic registry (which checks the metrics
// are consistent) and returns every sample that is not zero, as
// `name{label="value",...}`; a histogram gives name_count and name_sum.
func values(t testing.TB, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			slices.Sort(labels)
			suffix := ""
			if len(labels) > 0 {
				suffix = "{" + strings.Join(labels, ",") + "}"
			}
			put := func(name string, v float64) {
				if v != 0 {
					out[name+suffix] = v
				}
			}
			switch {
			case m.Counter != nil:
				put(f.GetName(), m.Counter.GetValue())
			case m.Gauge != nil:
				put(f.GetName(), m.Gauge.GetValue())
			case m.Histogram != nil:
				put(f.GetName()+"_count", float64(m.Histogram.GetSampleCount()))
				if m.Histogram.GetSampleSum() > 0 {
					out[f.GetName()+"_sum"+suffix] = -1 // present; its value is a duration
				}
			}
		}
	}
	return out
}

// series returns the names of every series c exports, zero or not.
func series(t testing.TB, c prometheus.Collector) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			out = append(out, f.GetName()+"{"+strings.Join(labels, ",")+"}")
		}
	}
	slices.Sort(out)
	return out
}
