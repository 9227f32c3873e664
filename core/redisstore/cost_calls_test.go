package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The commands the scripts run per decision, from INFO commandstats: a
// window's decision on a key that holds its window writes with one INCRBY
// (no SET, which rewrites value and expiry), within five commands in all
// (TIME, the override, the state, its expiry, the write); a fresh key and a
// new window are written with SET; a decideMany call on Redis TIME reads
// TIME once for all its ops.
func TestScriptCommandsPerDecision(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	s, err := New(client, WithPipelining(0, 0), WithTimeout(5*time.Second))
	require.NoError(t, err)
	_, err = s.r.load(ctx, s.r.loads.Load())
	require.NoError(t, err)
	calls := func() map[string]float64 {
		st, err := readStats(ctx, client)
		require.NoError(t, err)
		out := map[string]float64{}
		for name, c := range st.cmds {
			out[name] = c.calls
		}
		return out
	}
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(a.String(), func(t *testing.T) {
			l := core.Per(100, time.Hour).WithAlgorithm(a)
			k := core.Key{Identity: "id-" + a.String()}
			res := make([]core.Result, 1)
			require.NoError(t, client.ConfigResetStat(ctx).Err())
			require.NoError(t, s.Take(ctx, []core.Op{{Key: k, Limit: l, Cost: 1}}, res))
			first := calls()
			require.Equal(t, 1.0, first["set"], "a fresh key is written with SET")
			const n = 90 // through the warning threshold (80%)
			for range n {
				require.NoError(t, s.Take(ctx, []core.Op{{Key: k, Limit: l, Cost: 1}}, res))
				require.True(t, res[0].Allowed)
			}
			require.Equal(t, core.Warning, res[0].State)
			after := calls()
			require.Equal(t, 1.0, after["set"], "no SET on a key that holds its window")
			require.Equal(t, float64(n), after["incrby"])
			inner := 0.0
			for name, c := range after {
				if name != "fcall" && name != "info" && name != "config|resetstat" {
					inner += c - first[name]
				}
			}
			require.LessOrEqual(t, inner/n, 5.0)
		})
	}
	t.Run("decideMany", func(t *testing.T) {
		require.NoError(t, client.ConfigResetStat(ctx).Err())
		round := many64(s, core.Per(100, time.Hour).WithAlgorithm(core.FixedWindow))
		require.NoError(t, round(ctx, "many", 0))
		c := calls()
		require.Equal(t, 1.0, c["fcall"])
		require.Equal(t, 1.0, c["time"], "one TIME for the 64 ops of the call")
	})
}

// A window's state written by INCRBY is the one a SET would write: after
// each decision (fresh, the same window, the warning state rising and
// falling back to Normal in a new window, Throttled, a clock stepped back
// into an earlier window, a period that is not a whole number of ms so that
// the expiry has a sub-ms offset), the key holds exactly the value and
// expiry the encoding of lua/window.lua gives for the counts the Results
// report.
func TestWindowStateAsEncoded(t *testing.T) {
	ctx := context.Background()
	client := redistest.StartServer(t).Client(t)
	now := time.UnixMicro(1_800_000_000_000_000)
	s, err := New(client, WithClock(func() time.Time { return now }), WithTimeout(5*time.Second))
	require.NoError(t, err)
	const period = 1_000_700 // µs
	l := core.Per(10, period*time.Microsecond)
	steps := []int64{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, period, 3, -period - 50, 1, period / 2, period}
	t.Run("fixed", func(t *testing.T) {
		fl := l.WithAlgorithm(core.FixedWindow)
		k := core.Key{Identity: "fixed"}
		latest := int64(0) // the newest window's end recorded
		count := map[int64]int64{}
		for i, step := range steps {
			now = now.Add(time.Duration(step) * time.Microsecond)
			res := make([]core.Result, 1)
			require.NoError(t, s.Take(ctx, []core.Op{{Key: k, Limit: fl, Cost: 1}}, res))
			wend := (now.UnixMicro()/period + 1) * period
			if latest > wend {
				wend = latest // stepped back: the newer window counts
			}
			latest = wend
			if res[0].Allowed {
				count[wend]++
			}
			x := (wend + 999) / 1000
			want := ((x*1000-wend)<<40 + count[wend]) * 4
			want += int64(res[0].State)
			requireState(t, client, s.Key(k, core.FixedWindow), want, x, i)
		}
	})
	t.Run("counter", func(t *testing.T) {
		cl := l.WithAlgorithm(core.SlidingWindowCounter)
		k := core.Key{Identity: "counter"}
		const m = 1<<20 + 1
		latest := int64(-1)
		count := map[int64]int64{}
		for i, step := range steps {
			now = now.Add(time.Duration(step) * time.Microsecond)
			res := make([]core.Result, 1)
			require.NoError(t, s.Take(ctx, []core.Op{{Key: k, Limit: cl, Cost: 1}}, res))
			w := max(now.UnixMicro()/period, latest)
			latest = w
			if res[0].Allowed {
				count[w]++
			}
			expire := (w + 2) * period
			x := (expire + 999) / 1000
			want := (((x*1000-expire)*m+count[w-1])*m + count[w]) * 4
			want += int64(res[0].State)
			requireState(t, client, s.Key(k, core.SlidingWindowCounter), want, x, i)
		}
	})
}

// requireState requires key to hold value and to expire at x (ms).
func requireState(t *testing.T, client *redis.Client, key string, value, x int64, step int) {
	t.Helper()
	ctx := context.Background()
	raw, err := client.Get(ctx, key).Result()
	require.NoError(t, err, "step %d", step)
	got, err := strconv.ParseInt(raw, 10, 64)
	require.NoError(t, err, "step %d", step)
	require.Equal(t, value, got, "step %d: value", step)
	require.Equal(t, x, client.PExpireTime(ctx, key).Val().Milliseconds(), "step %d: expiry", step)
}
