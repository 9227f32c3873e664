package traffic_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/internal/traffic"
	"github.com/sluicehq/sluice/service/rules"
)

// twoRules: on /orders a caller's checks 1-8 are allowed, 9-10 warned
// (above 80% of 10), 11 on denied; on /reports, under a shadow rule of 5,
// 1-4 allowed, 5 warned, 6 on shadow-denied (and admitted).
const twoRules = `rules:
  - name: orders
    dimension: user
    endpoint_pattern: [/orders]
    algorithm: fixed_window
    limit: 10
    window_seconds: 3600
  - name: reports
    dimension: user
    endpoint_pattern: [/reports]
    algorithm: fixed_window
    limit: 5
    window_seconds: 3600
    shadow: true
`

// clock is an explicit clock, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// newEngine is an engine on a memory store on clk under twoRules, observed
// by rec.
func newEngine(t testing.TB, clk *clock, rec *traffic.Recorder) *engine.Engine {
	t.Helper()
	st, err := memorystore.New(memorystore.WithClock(clk.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(context.Background(), st, rules.NewBytes("rules.yaml", []byte(twoRules)),
		engine.WithClock(clk.Now), engine.WithObserver(rec), engine.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	return e
}

// each runs f for callers callers, each on a goroutine of its own, and
// waits for them.
func each(t *testing.T, callers int, f func(user string)) {
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { f(fmt.Sprintf("u%d", i)) })
	}
	wg.Wait()
}

func check(t *testing.T, e *engine.Engine, user, endpoint string, n int) {
	for range n {
		_, err := e.Check(context.Background(), engine.Check{Dimension: "user", Identifier: user, Endpoint: endpoint, Cost: 1})
		if err != nil {
			t.Error(err)
			return
		}
	}
}

func counts(allowed, warned, shadow, denied int64) traffic.Counts {
	return traffic.Counts{traffic.Allowed: allowed, traffic.Warned: warned, traffic.ShadowDenied: shadow, traffic.Denied: denied}
}

// TestCountsUnderConcurrency: 64 callers check at once through a real
// engine on an explicit clock, in two seconds of one minute and in the next
// minute, while the sampler ticks beside them in the first; every outcome
// is counted once, in its rule, in the instance (once per check, by its
// worst), in its second and its minute.
func TestCountsUnderConcurrency(t *testing.T) {
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 10, 0, time.UTC)}
	rec := traffic.NewRecorder()
	e := newEngine(t, clk, rec)
	const callers = 64
	t0 := clk.Now()

	// Second 10: 12 checks each on /orders, the sampler ticking beside
	// them (each tick at 12:00:10.5 goes into second 10 as well).
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
				rec.Tick(t0.Add(500 * time.Millisecond))
			}
		}
	}()
	each(t, callers, func(u string) { check(t, e, u, "/orders", 12) })
	close(stop)
	<-ticked
	rec.Tick(t0.Add(1005 * time.Millisecond)) // the rest of second 10
	// Second 11: 7 each on /reports.
	clk.Set(t0.Add(time.Second + 100*time.Millisecond))
	each(t, callers, func(u string) { check(t, e, u, "/reports", 7) })
	rec.Tick(t0.Add(2005 * time.Millisecond))
	// A minute later: 1 more each on /orders (denied).
	clk.Set(t0.Add(time.Minute))
	each(t, callers, func(u string) { check(t, e, u, "/orders", 1) })
	rec.Tick(t0.Add(time.Minute + 1005*time.Millisecond))

	orders, reports := counts(8, 2, 0, 2), counts(4, 1, 2, 0)
	scale := func(c traffic.Counts, n int64) traffic.Counts {
		for i := range c {
			c[i] *= n
		}
		return c
	}
	now := t0.Add(time.Minute + 1005*time.Millisecond) // 12:01:11.005
	v := rec.Rule("orders", now)
	require.Equal(t, scale(orders, callers).Total()+callers, v.Hour.Total())
	require.Equal(t, scale(orders, callers), v.Minutes[58], "12:00")
	require.Equal(t, counts(0, 0, 0, callers), v.Minutes[59], "12:01, under way")
	require.Equal(t, time.Date(2026, 5, 1, 11, 2, 0, 0, time.UTC), v.FirstMinute)
	require.Equal(t, time.Date(2026, 5, 1, 12, 0, 11, 0, time.UTC), v.FirstSecond)
	require.Equal(t, counts(0, 0, 0, callers), v.Seconds[59], "12:01:10")
	for i, c := range v.Seconds[:59] {
		require.Zero(t, c.Total(), "second %d", i)
	}
	r := rec.Rule("reports", now)
	require.Equal(t, scale(reports, callers), r.Minutes[58])
	require.Equal(t, scale(reports, callers), r.Hour)

	in := rec.Instance(now)
	want := scale(orders, callers)
	want.Add(scale(reports, callers))
	require.Equal(t, want, in.Minutes[58])
	require.Equal(t, callers*(12+7+1), int(in.Hour.Total()), "every check once")

	// Per second, seen at 12:00:12.005: second 10 holds the orders, 11
	// the reports.
	s := rec.Instance(t0.Add(2005 * time.Millisecond))
	require.Equal(t, scale(orders, callers), s.Seconds[58])
	require.Equal(t, scale(reports, callers), s.Seconds[59])
	require.Equal(t, map[string]traffic.Counts{"orders": v.Hour, "reports": r.Hour}, rec.Hours(now))

	// Throttled: every caller, under orders (3 denials each: 2 + 1) and,
	// a shadow rule, under reports (2); orders' until is the end of its
	// hour window.
	most := rec.MostThrottled(now, 1000)
	require.Len(t, most, 2*callers)
	require.Equal(t, "orders", most[0].Rule)
	require.EqualValues(t, 3, most[0].Hour)
	require.False(t, most[0].Shadow)
	require.EqualValues(t, 2, most[len(most)-1].Hour)
	require.True(t, most[len(most)-1].Shadow)
	nowT := rec.ThrottledNow(now, 1000)
	require.Len(t, nowT, 2*callers)
	require.Len(t, rec.ThrottledNow(t0.Add(2*time.Hour), 1000), 0, "every retry time has come")
	require.Len(t, rec.MostThrottled(t0.Add(2*time.Hour), 1000), 0, "past the hour")
}

// TestRingsForget: counts older than the rings (a minute of seconds, an
// hour of minutes) are not shown, and a rule quiet for an hour is dropped.
func TestRingsForget(t *testing.T) {
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	rec := traffic.NewRecorder()
	e := newEngine(t, clk, rec)
	check(t, e, "ann", "/orders", 1)
	rec.Tick(clk.Now().Add(time.Second))
	require.EqualValues(t, 1, rec.Rule("orders", clk.Now().Add(time.Second)).Seconds[59][traffic.Allowed])
	later := clk.Now().Add(61 * time.Second)
	rec.Tick(later)
	v := rec.Rule("orders", later)
	for _, c := range v.Seconds {
		require.Zero(t, c.Total())
	}
	require.EqualValues(t, 1, v.Hour.Total())
	for m := range 62 {
		rec.Tick(clk.Now().Add(time.Duration(m+2) * time.Minute))
	}
	end := clk.Now().Add(63 * time.Minute)
	require.Zero(t, rec.Rule("orders", end).Hour.Total())
	require.Empty(t, rec.Hours(end))
	require.Zero(t, rec.Instance(end).Hour.Total())
}

// TestDecidedDoesNotAllocate: counting a decision allocates nothing once
// its rules are known: allowed or warned, or denied again for a caller
// already in the table of throttled callers.
func TestDecidedDoesNotAllocate(t *testing.T) {
	rec := traffic.NewRecorder()
	ev := benchEvent()
	denied := benchEvent()
	denied.Decision.Allowed = false
	denied.Decision.Results[0].Allowed, denied.Decision.Results[0].State = false, core.Throttled
	ctx := context.Background()
	for _, e := range []*engine.Event{ev, denied} {
		rec.Decided(ctx, e)
		require.Zero(t, testing.AllocsPerRun(1000, func() { rec.Decided(ctx, e) }))
	}
	rec.Tick(time.Now())
	require.Len(t, rec.MostThrottled(time.Now(), 10), 1, "the denials were counted")
}
