package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestErrorMessages: the messages a user reads name the policy and the field
// once, with one "sluice: " prefix, and still match their sentinel.
func TestErrorMessages(t *testing.T) {
	s, err := memorystore.New()
	require.NoError(t, err)
	defer s.Close()
	user := keyfunc.Header("X-User")

	t.Run("invalid limit", func(t *testing.T) {
		_, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(-3)}})
		require.ErrorIs(t, err, core.ErrInvalidLimit)
		require.EqualError(t, err, `sluice: policy "a": Limit.Rate: must be at least 1, got -3 (limit -3/1s token_bucket)`)
	})

	t.Run("invalid tier limit", func(t *testing.T) {
		tiering := core.Tiering{Key: user, Resolve: func(context.Context, string) (string, error) { return "", nil }}
		_, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(1), Tiers: map[string]core.Limit{"gold": core.Per(5, 0)}}},
			core.WithTiering(tiering))
		require.ErrorIs(t, err, core.ErrInvalidLimit)
		require.EqualError(t, err, `sluice: policy "a": Tiers["gold"].Period: must be at least 1µs, got 0s (limit 5/0s token_bucket)`)
	})

	t.Run("no key", func(t *testing.T) {
		l, err := core.NewLimiter(s, []core.Policy{{Name: "login", Key: user, Limit: core.PerMinute(5)}})
		require.NoError(t, err)
		_, err = l.Check(context.Background(), keyfunc.Static{})
		require.ErrorIs(t, err, core.ErrNoKey)
		require.EqualError(t, err, `sluice: policy "login": key: keyfunc: header "X-User" is empty`)
	})

	t.Run("construction", func(t *testing.T) {
		p := []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(1)}}
		_, err := core.NewLimiter(nil, p)
		require.EqualError(t, err, "sluice: nil store")
		_, err = core.NewLimiter(s, nil)
		require.EqualError(t, err, "sluice: no policies")
		l, err := core.NewLimiter(s, p)
		require.NoError(t, err)
		require.EqualError(t, l.SetPolicies(nil), "sluice: no policies", "the same words as NewLimiter")
	})

	t.Run("request", func(t *testing.T) {
		empty := func(keyfunc.Request) (string, error) { return "", nil }
		panics := func(keyfunc.Request) (string, error) { panic("boom") }
		l, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(1)}})
		require.NoError(t, err)
		r := keyfunc.Static{Headers: map[string][]string{"X-User": {"u"}}}
		_, err = l.CheckWith(context.Background(), r, core.Call{Cost: -1})
		require.ErrorIs(t, err, core.ErrInvalidCost)
		require.EqualError(t, err, "sluice: Call: Cost: must not be negative, got -1")
		_, err = l.CheckWith(context.Background(), r, core.Call{Key: empty})
		require.ErrorIs(t, err, core.ErrNoKey)
		require.EqualError(t, err, `sluice: policy "a": key: empty key`)
		_, err = l.CheckWith(context.Background(), r, core.Call{Key: panics})
		require.EqualError(t, err, `sluice: policy "a": key: key function panicked: boom`)
	})

	t.Run("key level and admin", func(t *testing.T) {
		ctx := context.Background()
		l, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(2)}})
		require.NoError(t, err)
		_, err = l.Allow(ctx, "a", "")
		require.ErrorIs(t, err, core.ErrNoKey)
		require.EqualError(t, err, "sluice: AllowN: identity: empty key") // Allow is AllowN with n 1
		_, err = l.AllowN(ctx, "a", "u", -1)
		require.ErrorIs(t, err, core.ErrInvalidCost)
		require.EqualError(t, err, "sluice: AllowN: n: must not be negative, got -1")
		_, err = l.WaitN(ctx, "a", "u", 3)
		require.ErrorIs(t, err, core.ErrExceedsCapacity)
		require.EqualError(t, err, `sluice: WaitN(n=3): policy "a": cost exceeds the limit's capacity 2`)
		err = l.Block(ctx, "a", "", time.Now().Add(time.Minute))
		require.ErrorIs(t, err, core.ErrNoKey)
		require.EqualError(t, err, "sluice: Block: identity: empty key")
		err = l.SetOverride(ctx, "a", "u", core.Limit{}, time.Now().Add(time.Minute))
		require.ErrorIs(t, err, core.ErrInvalidLimit)
		require.EqualError(t, err, "sluice: SetOverride: lim: a zero Limit (use Block)")
	})

	t.Run("idempotency settings at NewLimiter", func(t *testing.T) {
		_, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(1)}},
			core.WithIdempotency(core.Idempotency{TTL: time.Millisecond}))
		require.EqualError(t, err, "sluice: WithIdempotency: TTL: must be at least 1s and a whole number of microseconds, got 1ms")
	})

	t.Run("sentinels alone", func(t *testing.T) {
		for _, e := range []error{core.ErrInvalidLimit, core.ErrInvalidCost, core.ErrNoKey, core.ErrClosed} {
			require.Regexp(t, `^sluice: [a-z ]+$`, e.Error())
			require.NotErrorIs(t, errors.New(e.Error()), e)
		}
	})
}
