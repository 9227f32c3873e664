package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
)

// testBooking: a Take of one op with MaxDelay books a bucket's slot (see
// core.Op.MaxDelay): slots follow one another in booking order, a slot
// beyond the bound is not booked and counts nothing, a take waits behind
// the bookings, and a Refund at a slot gives it back. A window decides a
// take; a negative MaxDelay, or one in a Take of several ops, is an error
// wrapping ErrInvalidCost.
func testBooking(t *testing.T, newStore Factory) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock.Now)
			k := Key(t)
			now := clock.Now().UnixMicro()
			if !a.Bucket() {
				l := core.PerSecond(2).WithAlgorithm(a)
				require.True(t, book(t, s, k, l, 2, time.Hour).Allowed)
				r := book(t, s, k, l, 1, time.Hour)
				require.False(t, r.Allowed, "a window booked")
				require.Equal(t, now, r.At)
				bookUnderBucket(t, s, l, now)
				return
			}
			l := core.PerSecond(10).WithBurst(2).WithAlgorithm(a)
			bookSlots(t, s, k, l, now)
			bookInvalid(t, s, k, l)
			bookUntilOverrideEnds(t, s, clock, a)
			// A key whose own bucket books about a second ahead at most.
			bookUnderBucket(t, s, core.Limit{Algorithm: a, Rate: 999_999_937, Period: 1000 * time.Second, Burst: 8_000_000}, now)
		})
	}
}

// book is a Take of one op of k with maxDelay, failing t on an error.
func book(t *testing.T, s core.Store, k core.Key, l core.Limit, cost int64, maxDelay time.Duration) core.Result {
	t.Helper()
	var out [1]core.Result
	require.NoError(t, s.Take(context.Background(), []core.Op{{Key: k, Limit: l, Cost: cost, MaxDelay: maxDelay}}, out[:]))
	return out[0]
}

// bookSlots: k's bucket under l (10 a second, a burst of 2) books its
// burst at once and a slot every 100 ms after it, none beyond the bound;
// a take waits behind the bookings, and a slot refunded is booked again.
func bookSlots(t *testing.T, s core.Store, k core.Key, l core.Limit, now int64) {
	ctx := context.Background()
	r := book(t, s, k, l, 2, time.Second)
	require.True(t, r.Allowed)
	require.Zero(t, r.RetryAfter)
	require.Equal(t, now, r.At)
	for i := int64(1); i <= 3; i++ {
		r = book(t, s, k, l, 1, time.Second)
		require.True(t, r.Allowed, "booking %d", i)
		require.Equal(t, time.Duration(i)*100*time.Millisecond, r.RetryAfter)
		require.Equal(t, now+i*100_000, r.At)
		require.Zero(t, r.Remaining)
	}
	r = book(t, s, k, l, 1, 350*time.Millisecond)
	require.False(t, r.Allowed, "booked beyond the bound")
	require.Equal(t, 400*time.Millisecond, r.RetryAfter)
	r = mustTake(ctx, t, s, k, l, 1)
	require.False(t, r.Allowed, "a take overtook the bookings")
	require.Equal(t, 400*time.Millisecond, r.RetryAfter)
	require.NoError(t, s.Refund(ctx, core.Admission{Key: k, Limit: l, Cost: 1, At: now + 300_000}))
	r = book(t, s, k, l, 1, 350*time.Millisecond)
	require.True(t, r.Allowed, "the cancelled slot was not given back")
	require.Equal(t, now+300_000, r.At)
}

// bookInvalid: a negative MaxDelay, or one in a Take of several ops, is
// an error wrapping ErrInvalidCost.
func bookInvalid(t *testing.T, s core.Store, k core.Key, l core.Limit) {
	ctx := context.Background()
	var out [2]core.Result
	err := s.Take(ctx, []core.Op{{Key: k, Limit: l, Cost: 1, MaxDelay: -time.Second}}, out[:1])
	require.ErrorIs(t, err, core.ErrInvalidCost)
	checkField(t, "a negative MaxDelay", err, "ops[0].MaxDelay")
	err = s.Take(ctx, []core.Op{{Key: k, Limit: l, Cost: 1}, {Key: Key(t), Limit: l, Cost: 1, MaxDelay: time.Second}}, out[:])
	require.ErrorIs(t, err, core.ErrInvalidCost)
	checkField(t, "a booking in a group", err, "ops[1].MaxDelay")
}

// bookUntilOverrideEnds: under an override a slot is booked only before
// the override ends: after it, the Key's own limit applies.
func bookUntilOverrideEnds(t *testing.T, s core.Store, clock *Clock, a core.Algorithm) {
	ko := Key(t)
	until := clock.Now().Add(time.Second)
	require.NoError(t, s.SetOverride(context.Background(), ko, core.Override{Limit: core.PerSecond(10).WithBurst(1).WithAlgorithm(a), Until: until}))
	own := core.PerSecond(1).WithBurst(1).WithAlgorithm(a)
	booked := 0
	for range 15 {
		if r := book(t, s, ko, own, 1, 3*time.Second); r.Allowed {
			booked++
			require.Less(t, r.At, until.UnixMicro(), "slot %d booked under the override after it ends", booked)
		}
	}
	require.Equal(t, 10, booked, "the burst and 9 slots before the override ends")
}

// bookUnderBucket: the limit applied books, an override's as much as the
// Key's own: under an override that is a bucket of one per 10 s, a slot 10 s
// ahead is booked for a Key whose own limit (own) cannot book that far (a
// window, or a bucket whose longest booking, algo.Spec.MaxDelay, is
// shorter).
func bookUnderBucket(t *testing.T, s core.Store, own core.Limit, now int64) {
	t.Helper()
	k := Key(t)
	ov := core.Per(1, 10*time.Second).WithBurst(1)
	require.NoError(t, s.SetOverride(context.Background(), k, core.Override{Limit: ov, Until: time.UnixMicro(now).Add(time.Minute)}))
	require.True(t, book(t, s, k, own, 1, 20*time.Second).Allowed)
	r := book(t, s, k, own, 1, 20*time.Second)
	require.True(t, r.Allowed, "under %s, %s did not book: %+v", ov, own, r)
	require.Equal(t, 10*time.Second, r.RetryAfter)
	require.Equal(t, now+10_000_000, r.At)
}
