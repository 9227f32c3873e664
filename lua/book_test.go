package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// scriptLimit is the limit argument of the scripts (decide.lua, "limit"):
// the algorithm's code and its six parameters, as core/redisstore builds it.
func scriptLimit(sp *algo.Spec) string {
	code, n := lua.CodeBucket, [6]int64{sp.Q, sp.T, sp.Full, sp.Capacity, sp.WarnAbove, sp.ClearBelow}
	switch sp.Algorithm {
	case core.FixedWindow:
		code, n = lua.CodeFixed, [6]int64{sp.Period, sp.Limit.Rate, sp.WarnAbove, sp.ClearBelow}
	case core.SlidingWindowLog:
		code, n = lua.CodeLog, [6]int64{sp.Period, sp.Limit.Rate, sp.WarnAbove, sp.ClearBelow}
	case core.SlidingWindowCounter:
		code, n = lua.CodeCounter, [6]int64{sp.Period, sp.Limit.Rate, sp.Full, sp.WarnAbove, sp.ClearBelow}
	}
	f := []string{code}
	for _, v := range n {
		f = append(f, strconv.FormatInt(v, 10))
	}
	return strings.Join(f, " ")
}

// outcome reads the first seven integers of a reply (decide.lua,
// OUTCOME_LEN) as an algo.Outcome.
func outcome(t *testing.T, reply any) algo.Outcome {
	t.Helper()
	r, ok := reply.([]any)
	require.True(t, ok, "reply %v", reply)
	require.GreaterOrEqual(t, len(r), 7)
	n := make([]int64, 7)
	for i := range n {
		n[i], ok = r[i].(int64)
		require.True(t, ok, "reply %v", reply)
	}
	return algo.Outcome{Allowed: n[0] == 1, Remaining: n[1], Retry: n[2], Reset: n[3], State: core.State(n[4]), Previous: core.State(n[5]), At: n[6]}
}

// shortOutcome reads decide1's short reply (decide.lua, SHORT_LEN
// integers: the flags allowed + 2*state + 8*previous state, remaining,
// retry, reset, at) as an algo.Outcome.
func shortOutcome(t *testing.T, reply any) algo.Outcome {
	t.Helper()
	r, ok := reply.([]any)
	require.True(t, ok, "reply %v", reply)
	require.Len(t, r, 5, "reply %v", reply)
	n := make([]int64, 5)
	for i := range n {
		n[i], ok = r[i].(int64)
		require.True(t, ok, "reply %v", reply)
	}
	return algo.Outcome{Allowed: n[0]&1 == 1, Remaining: n[1], Retry: n[2], Reset: n[3], State: core.State(n[0] >> 1 & 3), Previous: core.State(n[0] >> 3 & 3), At: n[4]}
}

// The same random traces of takes, bookings (any bound, up to MaxDelay),
// peeks of bookings, cancels of earlier admissions by their instant, and
// clock steps both ways, through Spec.Step, Spec.Book and Spec.Refund in
// Go and through decide1 (with its booking argument) and refund on a real
// Redis: the same Outcome at every step, for the three buckets (fractional
// intervals and a rate whose TAT clamp is within reach included) and for
// the windows, which never book.
func TestBookSameAsGo(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	decide1, refund := lua.Decide1(), lua.Refund()
	rng := rand.New(rand.NewPCG(13, 14))
	base := time.Now().Add(2 * time.Hour).Truncate(time.Hour).UnixMicro() // Redis expires keys in real time
	limits := []core.Limit{
		core.PerSecond(10), core.PerSecond(3).WithBurst(1).WithAlgorithm(core.GCRA),
		core.Per(7, 3*time.Second).WithBurst(4).WithAlgorithm(core.LeakyBucket),
		{Algorithm: core.TokenBucket, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 9_000_000},
		core.PerSecond(5).WithAlgorithm(core.FixedWindow), core.PerSecond(5).WithAlgorithm(core.SlidingWindowCounter),
	}
	for i := range 6 {
		l := core.Per(1+rng.Int64N(15), time.Duration(1+rng.Int64N(3_000_000))*time.Microsecond).WithBurst(rng.Int64N(20))
		limits = append(limits, l.WithAlgorithm([]core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA}[i%3]))
	}
	compared, booked := 0, 0
	for li, l := range limits {
		sp := algo.MustCompile(l)
		lim := scriptLimit(&sp)
		key := fmt.Sprintf("{book-%d-%d}", li, rng.Uint64())
		keys := []string{key, key + ":o", key + ":os"}
		P := int64(l.Period / time.Microsecond)
		step := max(P/l.Rate*2, 2)
		now, back := base, int64(0)
		var st algo.State
		var ats, costs []int64
		var history []string
		for i := range 400 {
			var d int64
			switch rng.IntN(12) {
			case 0:
				d = rng.Int64N(2 * P)
			case 1:
				d = -rng.Int64N(step)
			case 2:
				d = -rng.Int64N(int64(10 * time.Minute / time.Microsecond))
			case 3, 4:
			default:
				d = rng.Int64N(step)
			}
			if back-d > int64(30*time.Minute/time.Microsecond) {
				d = -d
			}
			back -= d
			now += d
			var want algo.Outcome
			var reply any
			var err error
			var what string
			read := shortOutcome
			switch op := rng.IntN(10); {
			case op == 0 && len(ats) > 0: // cancel an earlier admission
				j := rng.IntN(len(ats))
				sp.Refund(&st, now, costs[j], ats[j])
				sp.Step(&st, &want, now, 0)
				what = fmt.Sprintf("refund %d of %d", costs[j], ats[j])
				reply, err = client.Eval(ctx, refund, keys[:2], now, 1, -1, lim, costs[j], ats[j], -1, 0).Result()
				read = outcome
				ats, costs = append(ats[:j], ats[j+1:]...), append(costs[:j], costs[j+1:]...)
			case op < 5: // a take
				cost := rng.Int64N(min(l.Capacity(), 20) + 1)
				sp.Step(&st, &want, now, cost)
				what = fmt.Sprintf("take %d", cost)
				reply, err = client.Eval(ctx, decide1, keys, now, lim, cost).Result()
				if want.Allowed && cost > 0 {
					ats, costs = append(ats, want.At), append(costs, cost)
				}
			default: // a booking
				cost := rng.Int64N(min(l.Capacity(), 20) + 1)
				maxDelay := rng.Int64N(3 * P)
				if rng.IntN(8) == 0 {
					maxDelay = sp.MaxDelay()
				}
				sp.Book(&st, &want, now, cost, maxDelay)
				what = fmt.Sprintf("book %d within %dµs", cost, maxDelay)
				reply, err = client.Eval(ctx, decide1, keys, now, lim, cost, maxDelay).Result()
				if want.Allowed && cost > 0 {
					ats, costs = append(ats, want.At), append(costs, cost)
					if want.At > now {
						booked++
					}
				}
			}
			require.NoError(t, err)
			history = append(history, fmt.Sprintf("at %d %s: %+v", now, what, want))
			got := read(t, reply)
			compared++
			require.Equal(t, want, got, "%s step %d:\n%s", l, i, strings.Join(history[max(0, len(history)-10):], "\n"))
		}
	}
	t.Logf("%d steps compared, %d bookings ahead", compared, booked)
	require.Greater(t, booked, 200, "the traces book ahead")
}
