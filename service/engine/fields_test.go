package engine_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
	"github.com/sluicehq/sluice/service/engine"
)

// TestFormatterIsFieldsFor: a Formatter writes exactly the fields
// FieldsFor's Config formats, over random decisions of a few rules under
// changing limits (tiers, overrides: the text it keeps is per rule and
// limit), shadow rules, denials, every failure mode, and every family of
// fields omitted or not, both reset formats; and it writes them in one
// allocation.
func TestFormatterIsFieldsFor(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2))
	names := []string{"per-user", "orders", "edge.a"}
	limits := []core.Limit{core.PerMinute(10), core.PerHour(3), core.PerSecond(1000).WithAlgorithm(core.GCRA), {Algorithm: core.FixedWindow, Rate: 7, Period: 90 * time.Second}}
	sources := []core.Source{core.FromStore, core.FromDenyCache, core.FailedOpen, core.FailedClosed, core.FromFallback}
	var cs []ratelimitfields.Config
	for omit := range ratelimitfields.Families(16) {
		for _, reset := range []ratelimitfields.ResetFormat{ratelimitfields.ResetEpoch, ratelimitfields.ResetDelta} {
			cs = append(cs, ratelimitfields.Config{Omit: omit, Reset: reset})
		}
	}
	at := time.Unix(1_800_000_000, 123_000)
	for _, c := range cs {
		f := engine.NewFormatter(c)
		for i := range 300 {
			d := core.Decision{Allowed: true}
			src := sources[r.IntN(len(sources))]
			for j := range 1 + r.IntN(3) {
				lim := limits[r.IntN(len(limits))]
				p := core.PolicyResult{Policy: names[(i+j)%len(names)], Limit: lim, Shadow: r.IntN(5) == 0}
				p.Result = core.Result{Allowed: r.IntN(3) > 0, Capacity: lim.Capacity(), Remaining: r.Int64N(lim.Capacity() + 1),
					ResetAfter: time.Duration(r.Int64N(int64(time.Hour))), At: at.UnixMicro(), Source: src, State: core.State(r.IntN(3))}
				if !p.Allowed {
					p.RetryAfter = time.Duration(r.Int64N(int64(time.Hour)))
					if r.IntN(4) == 0 {
						p.RetryAfter = core.RetryNever
					}
					d.Allowed = d.Allowed && p.Shadow
				}
				if r.IntN(4) == 0 {
					over := limits[r.IntN(len(limits))]
					p.Applied = &over
					p.Limit, p.Capacity = over, over.Capacity()
				}
				d.Results = append(d.Results, p)
			}
			d.Binding = r.IntN(len(d.Results))
			want := engine.FieldsFor(c, src).Format(&d, at)
			require.Equal(t, want, f.Format(&d, src, at), "config %+v case %d %+v", c, i, d)
		}
		d := core.Decision{Allowed: true, Results: []core.PolicyResult{{Policy: names[0], Limit: limits[0],
			Result: core.Result{Allowed: true, Capacity: 10, Remaining: 4, ResetAfter: time.Second, At: at.UnixMicro()}}}}
		f.Format(&d, core.FromStore, at)
		require.LessOrEqual(t, testing.AllocsPerRun(100, func() { f.Format(&d, core.FromStore, at) }), 1.0, "config %+v", c)
	}
}
