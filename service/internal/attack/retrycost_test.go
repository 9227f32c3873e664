package attack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestAttackRetryAfterCost: retry_after is the wait until a check of the
// same cost passes: a denied check of cost 3 (of a limit of 4 per second)
// retried after exactly that wait passes, and one µs earlier is denied,
// for each algorithm; a cost above the limit is never told a wait
// (retry_after absent: never). The store and the engine decide on an
// explicit clock that the caller moves.
func TestAttackRetryAfterCost(t *testing.T) {
	for _, algorithm := range algorithms {
		t.Run(algorithm, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			clock := limitertest.NewClock()
			s := startStack(t, memStore(t, memorystore.WithClock(clock.Now)), fmt.Sprintf(`
rules:
  - name: one
    dimension: user
    algorithm: %s
    rate: 4
    period: 1s
`, algorithm), engine.WithClock(clock.Now))
			check := func(cost int64) *ratelimitv1.CheckResponse {
				r, err := s.native.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "u", Cost: proto.Int64(cost)})
				require.NoError(t, err)
				return r
			}
			for round := range 2 {
				var r *ratelimitv1.CheckResponse
				for range 10 {
					if r = check(3); !r.GetAllowed() {
						break
					}
				}
				require.False(t, r.GetAllowed())
				require.NotNil(t, r.GetRetryAfter(), "round %d", round)
				wait := r.GetRetryAfter().AsDuration()
				require.Positive(t, wait)
				clock.Advance(wait - time.Microsecond)
				require.False(t, check(3).GetAllowed(), "round %d: cost 3 admitted 1µs before retry_after %s", round, wait)
				clock.Advance(time.Microsecond)
				require.True(t, check(3).GetAllowed(), "round %d: cost 3 denied again after retry_after %s", round, wait)
			}
			r := check(5)
			require.False(t, r.GetAllowed())
			require.Nil(t, r.GetRetryAfter(), "a cost above the limit was told to wait %v", r.GetRetryAfter())
		})
	}
}
