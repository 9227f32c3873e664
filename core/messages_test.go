package core_test

import (
	"context"
	"errors"
	"testing"

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
		require.EqualError(t, err, `sluice: policy "a": invalid limit: Rate: must be at least 1, got -3 (limit -3/1s token_bucket)`)
	})

	t.Run("invalid tier limit", func(t *testing.T) {
		tiering := core.Tiering{Key: user, Resolve: func(context.Context, string) (string, error) { return "", nil }}
		_, err := core.NewLimiter(s, []core.Policy{{Name: "a", Key: user, Limit: core.PerSecond(1), Tiers: map[string]core.Limit{"gold": core.Per(5, 0)}}},
			core.WithTiering(tiering))
		require.ErrorIs(t, err, core.ErrInvalidLimit)
		require.EqualError(t, err, `sluice: policy "a": tier "gold": invalid limit: Period: must be at least 1µs, got 0s (limit 5/0s token_bucket)`)
	})

	t.Run("no key", func(t *testing.T) {
		l, err := core.NewLimiter(s, []core.Policy{{Name: "login", Key: user, Limit: core.PerMinute(5)}})
		require.NoError(t, err)
		_, err = l.Check(context.Background(), keyfunc.Static{})
		require.ErrorIs(t, err, core.ErrNoKey)
		require.EqualError(t, err, `sluice: policy "login": key: keyfunc: header "X-User" is empty`)
	})

	t.Run("sentinels alone", func(t *testing.T) {
		for _, e := range []error{core.ErrInvalidLimit, core.ErrInvalidCost, core.ErrNoKey, core.ErrClosed} {
			require.Regexp(t, `^sluice: [a-z ]+$`, e.Error())
			require.NotErrorIs(t, errors.New(e.Error()), e)
		}
	})
}
