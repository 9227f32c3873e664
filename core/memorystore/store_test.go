package memorystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

func TestConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		s, err := memorystore.New(memorystore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// takeID is a one-op Take of the identity id, without a policy.
func takeID(ctx context.Context, s core.Store, id string, l core.Limit, cost int64) (core.Result, error) {
	return limitertest.TakeOne(ctx, s, core.Key{Identity: id}, l, cost)
}
