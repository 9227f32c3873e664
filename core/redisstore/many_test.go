package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// decideMany (the call a pipeline of one-op takes to a standalone server
// becomes) against the memory store: random rounds of one-op takes of six
// keys, every algorithm among them and one limit or several per round, the
// same key more than once in a round, costs of 0 to beyond the capacity,
// overrides and blocks set and cleared, and clock steps forwards and
// backwards, small and large, through TakeEach on Redis (one decideMany
// FCALL a round) and one Take after the other on the memory store: the
// same Results at every step.
func TestManySameAnswersAsMemory(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(31, 32))
	compared, overridden, rounds := 0, 0, 0
	for iter := range 24 {
		clock := limitertest.NewClock()
		mem, err := traceMemory(clock)
		require.NoError(t, err)
		red := newStore(t, client, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
		base := limitertest.Key(t).Identity
		warm := []core.Take{{Ops: []core.Op{{Key: core.Key{Identity: base + "-warm"}, Limit: core.PerSecond(1)}}, Out: make([]core.Result, 1)}}
		red.TakeEach(ctx, append(warm, warm...)) // the library loaded
		type policy struct {
			key   core.Key
			limit core.Limit
		}
		var ps []policy
		shared := core.Per(1+rng.Int64N(12), time.Duration(1+rng.Int64N(2_000_000))*time.Microsecond).WithAlgorithm(limitertest.Algorithms[iter%6])
		for j := range 6 {
			l := shared
			if iter%2 == 1 && j%2 == 1 { // several limits in a call
				l = core.Per(1+rng.Int64N(12), time.Duration(1+rng.Int64N(2_000_000))*time.Microsecond).WithAlgorithm(limitertest.Algorithms[rng.IntN(6)])
			}
			if l.Algorithm.Bucket() {
				l.Burst = rng.Int64N(10)
			}
			if l.Validate() != nil {
				l = core.PerSecond(5).WithAlgorithm(l.Algorithm)
			}
			ps = append(ps, policy{core.Key{Identity: fmt.Sprint(base, "-", j), Policy: "p"}, l})
		}
		var history []string
		var back time.Duration
		for step := range 80 {
			P := ps[rng.IntN(len(ps))].limit.Period
			var d time.Duration
			switch rng.IntN(10) {
			case 0:
				d = -time.Duration(rng.Int64N(int64(P)))
			case 1:
				d = -time.Duration(rng.Int64N(int64(3 * P))) // back across windows
			case 2:
				d = -time.Duration(rng.Int64N(int64(20 * time.Minute)))
			case 3:
				d = time.Duration(rng.Int64N(int64(2 * P)))
			case 4:
			default:
				d = time.Duration(rng.Int64N(int64(P) / 4))
			}
			d = d.Truncate(time.Microsecond)
			if back-d > 30*time.Minute { // Redis expires keys in real time: stay ahead of it
				d = -d
			}
			back -= d
			clock.Advance(d)
			now := clock.Now().UnixMicro()
			if rng.IntN(10) == 0 {
				p := ps[rng.IntN(len(ps))]
				if rng.IntN(4) == 0 {
					require.NoError(t, mem.ClearOverride(ctx, p.key))
					require.NoError(t, red.ClearOverride(ctx, p.key))
					history = append(history, fmt.Sprintf("at %d override of %q cleared", now, p.key))
					continue
				}
				o := core.Override{Until: clock.Now().Add(time.Duration(1+rng.Int64N(int64(3*p.limit.Period/time.Microsecond))) * time.Microsecond)}
				if rng.IntN(2) == 0 {
					o.Limit = limitertest.WaitLimit(rng, limitertest.Algorithms[rng.IntN(6)])
				}
				require.NoError(t, mem.SetOverride(ctx, p.key, o))
				require.NoError(t, red.SetOverride(ctx, p.key, o))
				history = append(history, fmt.Sprintf("at %d override of %q %+v", now, p.key, o))
				continue
			}
			takes := make([]core.Take, 2+rng.IntN(9))
			want := make([][1]core.Result, len(takes))
			for i := range takes {
				p := ps[rng.IntN(len(ps))]
				cost := int64(1)
				switch rng.IntN(6) {
				case 0:
					cost = 0
				case 1:
					cost = rng.Int64N(min(p.limit.Capacity(), 30) + 2)
				}
				takes[i] = core.Take{Ops: []core.Op{{Key: p.key, Limit: p.limit, Cost: cost}}, Out: make([]core.Result, 1)}
				require.NoError(t, mem.Take(ctx, takes[i].Ops, want[i][:]))
			}
			fcalls := redistest.CommandCalls(t, client, "fcall")
			red.TakeEach(ctx, takes)
			rounds++
			require.Equal(t, fcalls+1, redistest.CommandCalls(t, client, "fcall"), "one decideMany call for the round")
			history = append(history, fmt.Sprintf("at %d %d takes", now, len(takes)))
			for i, tk := range takes {
				require.NoError(t, tk.Err)
				w, g := want[i][0], tk.Out[0]
				history = append(history, fmt.Sprintf("    %q %s cost %d: %+v", tk.Ops[0].Key, tk.Ops[0].Limit, tk.Ops[0].Cost, w))
				if w.Applied != nil || w.State == core.Throttled && w.Override != 0 {
					overridden++
				}
				require.Equal(t, w.Override != 0, g.Override != 0, "iter %d step %d take %d: an override named", iter, step, i)
				w.Override, g.Override = 0, 0
				require.Equal(t, w.Applied != nil, g.Applied != nil, "iter %d step %d take %d: an override applied", iter, step, i)
				if w.Applied != nil {
					require.Equal(t, *w.Applied, *g.Applied, "iter %d step %d take %d: the override applied", iter, step, i)
				}
				w.Applied, g.Applied = nil, nil
				if w != g {
					t.Fatalf("iter %d step %d take %d: redis %+v\nhistory (memory):\n%s", iter, step, i, g, strings.Join(history[max(0, len(history)-24):], "\n"))
				}
				compared++
			}
		}
		mem.Close()
	}
	t.Logf("%d decisions compared in %d decideMany calls (%d under an override)", compared, rounds, overridden)
	require.Positive(t, overridden)
}
