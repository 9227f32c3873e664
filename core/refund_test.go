package core_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A refund gives back the units of the request it refers to, once: a
// fixed-window refund of a request of the previous window frees nothing in
// the current one (which would make three admissions in a window of two),
// and refunding a Decision again gives nothing more, for every algorithm.
func TestLimiterRefundUndoesOnlyItsRequestOnce(t *testing.T) {
	ctx := context.Background()
	req := &keyfunc.Static{Remote: "192.0.2.1:1"}
	newLimiter := func(t *testing.T, clock *limitertest.Clock, lim core.Limit) *core.Limiter {
		s, err := memorystore.New(memorystore.WithClock(clock.Now))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Const("all"), Limit: lim, Refund: core.RefundFailed}})
		require.NoError(t, err)
		return l
	}
	check := func(t *testing.T, l *core.Limiter) core.Decision {
		t.Helper()
		d, err := l.Check(ctx, req)
		require.NoError(t, err)
		return d
	}

	t.Run("previous-window", func(t *testing.T) {
		clock := limitertest.NewClock()
		l := newLimiter(t, clock, core.Per(2, time.Second).WithAlgorithm(core.FixedWindow))
		clock.Advance(900 * time.Millisecond)
		old := check(t, l)
		clock.Advance(200 * time.Millisecond)
		require.True(t, old.Allowed && check(t, l).Allowed && check(t, l).Allowed)
		require.NoError(t, l.Refund(ctx, &old, 500))
		require.False(t, check(t, l).Allowed, "a refund of the previous window's request freed room in this one")
	})

	for _, a := range limitertest.Algorithms {
		t.Run(a.String()+"/twice", func(t *testing.T) {
			clock := limitertest.NewClock()
			lim := core.PerMinute(4).WithAlgorithm(a)
			l := newLimiter(t, clock, lim)
			first, second := check(t, l), check(t, l)
			require.True(t, first.Allowed && second.Allowed)
			require.True(t, first.Refundable())
			require.NoError(t, l.Refund(ctx, &first, 200), "a success is not refunded")
			require.NoError(t, l.Refund(ctx, &first, 503))
			require.False(t, first.Refundable(), "a refunded Decision has nothing more to give")
			for range 3 {
				require.NoError(t, l.Refund(ctx, &first, 503))
			}
			peek, err := l.Peek(ctx, req)
			require.NoError(t, err)
			require.Equal(t, int64(3), peek.Results[0].Remaining, "one request left counted, whatever the number of refunds")
		})
	}
}

// storeFactory returns a store on clock; stores of one factory may share a
// backend (tests use fresh identities).
type storeFactory func(t *testing.T, clock func() time.Time) core.Store

// Refunds during an override: an admission made under an
// identity's override is given back to that override's state, under its
// limit, and the identity's own state is left as it was; once that
// override has ended, been cleared or been replaced (even by an identical
// one), a refund gives back nothing, anywhere. For every algorithm of the
// policy, the override's limit of another algorithm, one policy or two
// whose identities differ (a group: one script per identity on a Redis
// Cluster, undone by compensation when the group is denied).
func TestRefundUnderOverride(t *testing.T) {
	testRefundUnderOverride(t, func(t *testing.T, clock func() time.Time) core.Store {
		s, err := memorystore.New(memorystore.WithClock(clock))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func testRefundUnderOverride(t *testing.T, newStore storeFactory) {
	ctx := context.Background()
	for i, a := range limitertest.Algorithms {
		base := core.PerMinute(3).WithAlgorithm(a)
		raise := core.PerMinute(10).WithAlgorithm(limitertest.Algorithms[(i+1)%len(limitertest.Algorithms)])
		for _, group := range []bool{false, true} {
			name := fmt.Sprintf("%s/group=%v", a, group)
			// setup returns a limiter whose policy "user" (index 0) the
			// request's identity has used once, and that identity.
			setup := func(t *testing.T) (*limitertest.Clock, *core.Limiter, keyfunc.Request, string) {
				clock := limitertest.NewClock()
				ps := []core.Policy{{Name: "user", Key: keyfunc.Header("U"), Limit: base, Refund: core.RefundFailed}}
				if group {
					ps = append(ps, core.Policy{Name: "global", Key: keyfunc.Const(limitertest.Key(t).Identity), Limit: core.PerMinute(1000), Refund: core.RefundFailed})
				}
				l, err := core.NewLimiter(newStore(t, clock.Now), ps)
				require.NoError(t, err)
				id := limitertest.Key(t).Identity
				r := keyfunc.Static{Headers: map[string][]string{"U": {id}}}
				d, err := l.Check(ctx, r)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.Equal(t, int64(2), d.Results[0].Remaining)
				return clock, l, r, id
			}
			remaining := func(t *testing.T, l *core.Limiter, r keyfunc.Request) int64 {
				t.Helper()
				p, err := l.Peek(ctx, r)
				require.NoError(t, err)
				return p.Results[0].Remaining
			}
			check := func(t *testing.T, l *core.Limiter, r keyfunc.Request) core.Decision {
				t.Helper()
				d, err := l.Check(ctx, r)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.Equal(t, raise, d.Results[0].Limit, "the override applied")
				require.NotZero(t, d.Results[0].Override, "and is named")
				return d
			}
			// baseLeft ends the override and reports what the identity's own
			// state has left.
			baseLeft := func(t *testing.T, l *core.Limiter, r keyfunc.Request, id string) int64 {
				t.Helper()
				require.NoError(t, l.ClearOverride(ctx, "user", id))
				return remaining(t, l, r)
			}

			t.Run(name+"/in-force", func(t *testing.T) {
				clock, l, r, id := setup(t)
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(time.Hour)))
				d := check(t, l, r)
				check(t, l, r)
				require.Equal(t, int64(8), remaining(t, l, r))
				require.NoError(t, l.Refund(ctx, &d, 500))
				require.Equal(t, int64(9), remaining(t, l, r), "the override's state got the unit back")
				if group {
					p, err := l.Peek(ctx, r)
					require.NoError(t, err)
					require.Equal(t, int64(1000-3+1), p.Results[1].Remaining, "the other policy's admission was refunded too")
				}
				require.Equal(t, int64(2), baseLeft(t, l, r, id), "the identity's own state did not change")
			})

			t.Run(name+"/replaced", func(t *testing.T) {
				clock, l, r, id := setup(t)
				until := clock.Now().Add(time.Hour)
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, until))
				d := check(t, l, r)
				// The same override again: a fresh state, which never
				// counted d.
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, until))
				check(t, l, r)
				require.NoError(t, l.Refund(ctx, &d, 500))
				require.Equal(t, int64(9), remaining(t, l, r), "no unit reached the new override's state")
				require.Equal(t, int64(2), baseLeft(t, l, r, id), "nor the identity's own")
			})

			t.Run(name+"/cleared", func(t *testing.T) {
				_, l, r, id := setup(t)
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, limitertest.NewClock().Now().Add(time.Hour)))
				d := check(t, l, r)
				require.NoError(t, l.ClearOverride(ctx, "user", id))
				require.NoError(t, l.Refund(ctx, &d, 500))
				require.Equal(t, int64(2), remaining(t, l, r), "no unit reached the identity's own state")
			})

			t.Run(name+"/ended", func(t *testing.T) {
				clock, l, r, id := setup(t)
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(10*time.Second)))
				d := check(t, l, r)
				clock.Advance(11 * time.Second)
				require.NoError(t, l.Refund(ctx, &d, 500))
				require.Equal(t, int64(2), remaining(t, l, r), "no unit reached the identity's own state")
				require.Equal(t, int64(2), baseLeft(t, l, r, id))
			})

			if group {
				t.Run(name+"/denied-group", func(t *testing.T) {
					// The group is denied by the other identity's policy:
					// the override's admission is undone (on a Redis Cluster,
					// by compensation, on the override's state).
					clock := limitertest.NewClock()
					l, err := core.NewLimiter(newStore(t, clock.Now), []core.Policy{
						{Name: "user", Key: keyfunc.Header("U"), Limit: base},
						{Name: "global", Key: keyfunc.Const(limitertest.Key(t).Identity), Limit: core.PerMinute(2)},
					})
					require.NoError(t, err)
					id := limitertest.Key(t).Identity
					r := keyfunc.Static{Headers: map[string][]string{"U": {id}}}
					require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(time.Hour)))
					check(t, l, r)
					check(t, l, r)
					d, err := l.Check(ctx, r)
					require.NoError(t, err)
					require.False(t, d.Allowed)
					require.Equal(t, int64(8), remaining(t, l, r), "the denied request left the override's state as it was")
					require.Equal(t, int64(3), baseLeft(t, l, r, id), "and the identity's own")
				})
			}

			t.Run(name+"/base-admission", func(t *testing.T) {
				// An admission made on the identity's own state goes back
				// there, though an override applies at the refund.
				clock, l, r, id := setup(t)
				d, err := l.Check(ctx, r)
				require.NoError(t, err)
				require.Zero(t, d.Results[0].Override)
				require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(time.Hour)))
				check(t, l, r)
				require.NoError(t, l.Refund(ctx, &d, 500))
				require.Equal(t, int64(9), remaining(t, l, r), "the override's state is not the one refunded")
				require.Equal(t, int64(2), baseLeft(t, l, r, id), "the identity's own state got the unit back")
			})
		}
	}
}

// Many goroutines check and refund one identity under overrides that they
// keep replacing and clearing: whatever the
// interleaving, no refund of an admission under an override reaches the
// identity's own state (it ends as it began once the admissions made on it
// are refunded, on a frozen clock), and no override admits more than its
// limit plus the units refunded of its own admissions.
func TestRefundUnderOverrideConcurrent(t *testing.T) {
	testRefundUnderOverrideConcurrent(t, func(t *testing.T, clock func() time.Time) core.Store {
		s, err := memorystore.New(memorystore.WithClock(clock))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func testRefundUnderOverrideConcurrent(t *testing.T, newStore storeFactory) {
	ctx := context.Background()
	for _, a := range limitertest.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clock := limitertest.NewClock() // frozen: one window
			base, raise := core.PerMinute(3).WithAlgorithm(a), core.PerMinute(10).WithAlgorithm(a)
			l, err := core.NewLimiter(newStore(t, clock.Now), []core.Policy{{Name: "user", Key: keyfunc.Header("U"), Limit: base, Refund: core.RefundFailed}})
			require.NoError(t, err)
			id := limitertest.Key(t).Identity
			r := keyfunc.Static{Headers: map[string][]string{"U": {id}}}
			d, err := l.Check(ctx, r)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(time.Hour)))

			var mu sync.Mutex
			admitted, refunded := map[uint64]int64{}, map[uint64]int64{}
			var workers sync.WaitGroup
			for g := range 8 {
				workers.Add(1)
				go func() {
					defer workers.Done()
					var held []core.Decision
					for i := range 60 {
						switch {
						case g == 0 && i%10 == 9:
							require.NoError(t, l.ClearOverride(ctx, "user", id))
						case (i+g)%7 == 0:
							require.NoError(t, l.SetOverride(ctx, "user", id, raise, clock.Now().Add(time.Hour)))
						}
						d, err := l.Check(ctx, r)
						require.NoError(t, err)
						if d.Allowed {
							mu.Lock()
							admitted[d.Results[0].Override]++
							mu.Unlock()
							held = append(held, d)
						}
						if len(held) > 0 && (i+g)%3 == 0 {
							d := held[0]
							held = held[1:]
							mu.Lock()
							refunded[d.Results[0].Override]++
							mu.Unlock()
							require.NoError(t, l.Refund(ctx, &d, 500))
						}
					}
					for _, d := range held { // the admissions on the identity's own state go back
						if d.Results[0].Override == 0 {
							require.NoError(t, l.Refund(ctx, &d, 500))
						}
					}
				}()
			}
			workers.Wait()
			require.Greater(t, len(admitted), 2, "admissions under several overrides and the identity's own")
			delete(admitted, 0)
			for ov, n := range admitted {
				require.LessOrEqual(t, n, raise.Rate+refunded[ov], "override %d admitted more than its limit and its refunds", ov)
			}
			require.NoError(t, l.ClearOverride(ctx, "user", id))
			p, err := l.Peek(ctx, r)
			require.NoError(t, err)
			require.Equal(t, int64(2), p.Results[0].Remaining, "the identity's own state is as it was, once its own admissions are refunded")
		})
	}
}
