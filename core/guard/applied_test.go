package guard_test

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// TestDegradedDecisionsStateTheLimitApplied: with the backend down, under
// every failure mode and for one op and for a group, a Decision's results
// state the limit applied as their Limit and Capacity, equal: the
// configured limit when the guard fails open or closed (never 0), its local
// share in fallback; and the headers' q and X-RateLimit-Limit are that
// capacity. On main a failed-open result had Capacity 0 and a fallback's
// Limit stayed the configured one while its Capacity was the share.
func TestDegradedDecisionsStateTheLimitApplied(t *testing.T) {
	configured := core.PerMinute(10).WithBurst(20)
	tier := core.PerMinute(100).WithBurst(150)
	down := fmt.Errorf("redis: %w", syscall.ECONNREFUSED)
	for _, c := range []struct {
		name       string
		opt        guard.Option
		want, gold core.Limit
	}{
		{"fail open", guard.WithFailOpen(), configured, tier},
		{"fail closed", guard.WithFailClosed(time.Second), configured, tier},
		{"fallback", guard.WithFallback(1), configured, tier},
		{"fallback shared by 3", guard.WithFallback(3), core.PerMinute(4).WithBurst(7), core.PerMinute(34).WithBurst(50)},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := limitertest.NewClock()
			b := newBackend(t, clk)
			b.failWith(down)
			g := newGuard(t, b, c.opt, guard.WithClock(clk.Now), guard.WithLogger(slog.New(slog.DiscardHandler)))
			l, err := core.NewLimiter(g, []core.Policy{
				{Name: "a", Key: keyfunc.Header("U"), Limit: configured, Tiers: map[string]core.Limit{"gold": tier}},
				{Name: "b", Key: keyfunc.Header("U"), Limit: configured},
			}, core.WithTiering(core.Tiering{Key: keyfunc.Header("U"), Resolve: func(_ context.Context, id string) (string, error) {
				if id == "g" {
					return "gold", nil
				}
				return "", nil
			}}))
			require.NoError(t, err)
			ctx := context.Background()
			for _, who := range []string{"u", "g"} {
				want := c.want
				if who == "g" {
					want = c.gold
				}
				for range 3 {
					d, err := l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"U": {who}}})
					require.NoError(t, err)
					require.True(t, d.Degraded())
					p := d.Results[0]
					require.Equal(t, want, p.Limit, "%s: the limit applied", who)
					require.Equal(t, want.Capacity(), p.Capacity, "%s: its capacity, never 0", who)
					// The fields (none when failed open: the quota is unknown).
					for field, v := range (ratelimitfields.Config{}).Format(&d, clk.Now()).All() {
						switch field {
						case ratelimitfields.FieldLimit:
							require.Equal(t, fmt.Sprint(d.Bound().Capacity), v)
						case ratelimitfields.FieldRateLimitPolicy:
							require.Contains(t, v, fmt.Sprintf(`"a";q=%d;`, want.Capacity()))
						}
					}
				}
				pr, err := l.AllowN(ctx, "b", who, 1)
				require.NoError(t, err)
				require.Equal(t, c.want, pr.Limit, "the key-level API states it too")
				require.Equal(t, c.want.Capacity(), pr.Capacity)
			}
		})
	}
}
