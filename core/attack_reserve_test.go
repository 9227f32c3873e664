package core_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Three Limiters (each with its own store and connection, sharing one
// memory store, one Redis, or one Cluster, and one manual clock) book, take
// and cancel on one key of each bucket from 6 goroutines while the clock
// moves forward and sometimes back: the admissions nobody cancelled never
// break the bucket's promise at the instants they are recorded at, and a
// booking's slot is never before its decision.
func TestAttackReserveMixedAcrossInstances(t *testing.T) {
	srv := redistest.StartServer(t)
	cl := shared.Cluster(t)
	stores := map[string]func(t *testing.T, clock func() time.Time) func() core.Store{
		"memory": func(t *testing.T, clock func() time.Time) func() core.Store {
			s := memStore(t, memorystore.WithClock(clock))
			return func() core.Store { return s }
		},
		"redis": func(t *testing.T, clock func() time.Time) func() core.Store {
			return func() core.Store { return redisClockStore(t, srv.Client(t), clock) }
		},
		"cluster": func(t *testing.T, clock func() time.Time) func() core.Store {
			return func() core.Store { return redisClockStore(t, cl.Client(t), clock) }
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.GCRA} {
				t.Run(a.String(), func(t *testing.T) {
					clock := limitertest.NewClock()
					newStore := mk(t, clock.Now)
					lim := core.PerSecond(10).WithBurst(3).WithAlgorithm(a)
					var ls [3]*core.Limiter
					for i := range ls {
						var err error
						ls[i], err = core.NewLimiter(newStore(), []core.Policy{{Name: "q", Key: ipKey(t), Limit: lim}})
						require.NoError(t, err)
					}
					testReserveMixed(t, ls[:], clock, lim, limitertest.Key(t).Identity)
				})
			}
		})
	}
}

func redisClockStore(t *testing.T, c redis.UniversalClient, clock func() time.Time) core.Store {
	s, err := redisstore.New(c, redisstore.WithClock(clock), redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

type held struct {
	r  *core.Reservation
	pr core.PolicyResult
}

func testReserveMixed(t *testing.T, ls []*core.Limiter, clock *limitertest.Clock, lim core.Limit, id string) {
	ctx := context.Background()
	var (
		mu        sync.Mutex
		kept      = map[*core.PolicyResult]limitertest.Admission{}
		bookings  []*held
		cancelled int
		wg        sync.WaitGroup
	)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 13))
			l := ls[g%len(ls)]
			for range 120 {
				switch op := rng.IntN(10); {
				case op < 4: // book
					n := 1 + rng.Int64N(3)
					maxDelay := time.Duration(rng.Int64N(int64(2 * time.Second)))
					r, err := l.ReserveN(ctx, "q", id, n, maxDelay)
					if !assertNoError(t, err) {
						return
					}
					if !r.OK() {
						continue
					}
					pr := r.Result()
					if pr.RetryAfter > maxDelay {
						t.Errorf("booked %s ahead, beyond the bound %s", pr.RetryAfter, maxDelay)
					}
					h := &held{r: r, pr: pr}
					mu.Lock()
					kept[&h.pr] = limitertest.Admission{At: pr.At, N: n}
					bookings = append(bookings, h)
					mu.Unlock()
				case op < 6: // take
					n := rng.Int64N(3)
					pr, err := l.AllowN(ctx, "q", id, n)
					if !assertNoError(t, err) {
						return
					}
					if pr.Allowed && n > 0 {
						mu.Lock()
						kept[&pr] = limitertest.Admission{At: pr.At, N: n}
						mu.Unlock()
					}
				case op < 7: // cancel a booking, maybe one already cancelled
					mu.Lock()
					if len(bookings) == 0 {
						mu.Unlock()
						continue
					}
					h := bookings[rng.IntN(len(bookings))]
					_, was := kept[&h.pr]
					delete(kept, &h.pr)
					if was {
						cancelled++
					}
					mu.Unlock()
					if !assertNoError(t, h.r.Cancel(ctx)) {
						return
					}
				default: // the clock moves: mostly forward, sometimes back
					d := time.Duration(rng.Int64N(int64(300*time.Millisecond))) - 60*time.Millisecond
					clock.Advance(d)
				}
			}
		}()
	}
	wg.Wait()
	adm := make([]limitertest.Admission, 0, len(kept))
	for _, a := range kept {
		adm = append(adm, a)
	}
	require.NotEmpty(t, adm)
	require.Positive(t, cancelled)
	require.NoError(t, limitertest.CheckPromise(lim, adm))
	t.Logf("%d admissions kept, %d bookings, %d cancelled", len(adm), len(bookings), cancelled)
}

// down is a backend whose every call fails, for the guard to degrade.
type down struct{}

func (down) Take(context.Context, []core.Op, []core.Result) error { return errDown }
func (down) Refund(context.Context, core.Admission) error         { return errDown }
func (down) Reset(context.Context, core.Key, core.Limit) error    { return errDown }
func (down) SetOverride(context.Context, core.Key, core.Override) error {
	return errDown
}
func (down) ClearOverride(context.Context, core.Key) error { return errDown }

var errDown = errors.New("backend down")

// Behind a guard whose backend is down, a booking is answered by the
// failure policy, as the ReserveN doc says: fail open is OK at once with
// nothing booked (its Cancel does nothing and is no error), fail closed is
// not OK; a Wait fails open at once, and fail closed gives up at once when
// the failure policy's retry ends after its deadline.
func TestAttackReserveBehindAFailingGuard(t *testing.T) {
	ctx := context.Background()
	lim := core.PerSecond(10).WithBurst(1)
	newLimiter := func(t *testing.T, opts ...guard.Option) *core.Limiter {
		g, err := guard.New(down{}, opts...)
		require.NoError(t, err)
		l, err := core.NewLimiter(g, []core.Policy{{Name: "q", Key: ipKey(t), Limit: lim}})
		require.NoError(t, err)
		return l
	}
	l := newLimiter(t, guard.WithFailOpen())
	for range 3 {
		r, err := l.Reserve(ctx, "q", "a", time.Second)
		require.NoError(t, err)
		require.True(t, r.OK())
		require.Zero(t, r.Delay())
		require.Equal(t, core.FailedOpen, r.Result().Source)
		require.NoError(t, r.Cancel(ctx))
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	pr, err := l.Wait(wctx, "q", "a")
	require.NoError(t, err)
	require.True(t, pr.Allowed)
	require.Less(t, time.Since(start), time.Second)

	l = newLimiter(t, guard.WithFailClosed(5*time.Second))
	r, err := l.Reserve(ctx, "q", "a", time.Hour)
	require.NoError(t, err)
	require.False(t, r.OK())
	require.Equal(t, core.FailedClosed, r.Result().Source)
	require.Equal(t, core.RetryNever, r.Delay())
	require.NoError(t, r.Cancel(ctx))
	start = time.Now()
	_, err = l.Wait(wctx, "q", "a")
	require.ErrorIs(t, err, core.ErrWouldExceedDeadline)
	require.Less(t, time.Since(start), time.Second)
}

// A careless caller's bounds: a huge maxDelay (RetryNever, the largest
// Duration) books like any other on every store; a booking whose slot lies
// past the bound counts nothing, however often it is asked; an override
// whose limit is a window admits now or not at all.
func TestAttackReserveBounds(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range attackStores(t) {
		t.Run(name, func(t *testing.T) {
			lim := core.PerSecond(1).WithBurst(1).WithAlgorithm(core.GCRA)
			s := newStore(t)
			l, err := core.NewLimiter(s, []core.Policy{{Name: "q", Key: ipKey(t), Limit: lim}})
			require.NoError(t, err)
			id := limitertest.Key(t).Identity
			// A booking's Result().At is its slot on the store's clock (µs).
			// Slots are compared with the first one's, not waits with fixed
			// values, so a loop slowed by a loaded machine (each booking made
			// later, waiting less) measures the same, as long as it books
			// each slot before it comes: a slot a second (at 10/s, one
			// booking made 250 ms after the first got a slot of its own).
			slot := func(r *core.Reservation) int64 { return r.Result().At }
			var first int64
			for i := range 3 {
				r, err := l.Reserve(ctx, "q", id, time.Duration(math.MaxInt64))
				require.NoError(t, err)
				require.True(t, r.OK())
				if i == 0 {
					first = slot(r)
				}
				require.InDelta(t, float64(first+int64(i)*1_000_000), float64(slot(r)), 20_000, "booking %d", i)
			}
			for range 20 {
				r, err := l.Reserve(ctx, "q", id, 500*time.Millisecond)
				require.NoError(t, err)
				require.False(t, r.OK())
			}
			r, err := l.Reserve(ctx, "q", id, time.Duration(math.MaxInt64))
			require.NoError(t, err)
			require.InDelta(t, float64(first+3_000_000), float64(slot(r)), 20_000, "a refused booking counted")

			// A window override: no slot ahead.
			k := core.Key{Identity: limitertest.Key(t).Identity, Policy: "q"}
			win := core.PerMinute(2).WithAlgorithm(core.FixedWindow)
			require.NoError(t, s.SetOverride(ctx, k, core.Override{Limit: win, Until: time.Now().Add(time.Hour)}))
			for i := range 4 {
				r, err := l.Reserve(ctx, "q", k.Identity, time.Hour)
				require.NoError(t, err)
				require.Equal(t, i < 2, r.OK(), "booking %d under a window override", i)
				require.Equal(t, win, r.Result().Limit)
				if r.OK() {
					require.Zero(t, r.Delay())
				}
			}
		})
	}
}

// A booking under an override is admitted under the override's limit only
// for a slot before the override ends: a request arriving later is decided
// under the policy's own limit, and so is a slot. (A client of a 1/s policy
// with a 10/s raise for one second booked 30 slots over 2.9s, 19 of them
// after the raise, and acted on them under a limit of 1/s.)
func TestAttackReserveUnderAnOverrideEndsWithIt(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range attackStores(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			l, err := core.NewLimiter(s, []core.Policy{{Name: "q", Key: ipKey(t), Limit: core.PerSecond(1).WithBurst(1)}})
			require.NoError(t, err)
			id := limitertest.Key(t).Identity
			k := core.Key{Identity: id, Policy: "q"}
			// A fresh store's first round trips (a cluster's slot map, the
			// script's load) are slow: pay them before the override's second
			// starts, so the loop books inside it.
			require.NoError(t, s.Reset(ctx, k, core.PerSecond(1).WithBurst(1)))
			until := time.Now().Add(time.Second)
			require.NoError(t, s.SetOverride(ctx, k, core.Override{Limit: core.PerSecond(10).WithBurst(1), Until: until}))
			booked, first := 0, int64(0)
			for range 30 {
				r, err := l.Reserve(ctx, "q", id, 3*time.Second)
				require.NoError(t, err)
				if !r.OK() || r.Result().Override == 0 {
					// Not booked, or booked under the policy's own limit:
					// on a slow store the loop may outlive the override.
					continue
				}
				if booked == 0 {
					first = r.Result().At
				}
				booked++
				require.Less(t, r.Result().At, until.UnixMicro(), "a slot booked under the override after it ends")
			}
			// Slots 100ms apart from the first booking to the override's
			// end: however late the loop started, no more and no fewer.
			require.Positive(t, booked, "nothing booked under the override")
			want := int((until.UnixMicro()-first)/100_000) + 1
			require.InDelta(t, want, booked, 1, "slots booked under a 10/s override from %d to %d", first, until.UnixMicro())
		})
	}
}
