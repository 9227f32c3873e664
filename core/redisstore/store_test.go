package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

func newStore(t *testing.T, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceSingleNode(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second))
	})
}

func TestConformanceUnpipelined(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	limitertest.Run(t, func(t *testing.T, clock func() time.Time) core.Store {
		return newStore(t, client, redisstore.WithClock(clock), redisstore.WithTimeout(10*time.Second), redisstore.WithPipelining(0, 0))
	})
}

// The same random traces through the memory store and the Redis store give
// identical Results at every step, for all six algorithms.
func TestSameAnswersAsMemory(t *testing.T) {
	client := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, a := range limitertest.Algorithms {
		for iter := range 6 {
			clock := limitertest.NewClock()
			mem, err := memorystore.New(memorystore.WithClock(clock.Now))
			require.NoError(t, err)
			red := newStore(t, client, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second))
			l := core.Per(1+rng.Int64N(15), time.Duration(1+rng.Int64N(3_000_000))*time.Microsecond).WithAlgorithm(a)
			if a.Bucket() {
				l.Burst = rng.Int64N(20)
			}
			if l.Validate() != nil {
				continue
			}
			key := limitertest.Key(t)
			step := l.Period / time.Duration(l.Rate) * 2
			var history []string
			for i := range 150 {
				switch rng.IntN(12) {
				case 0:
					clock.Advance(time.Duration(rng.Int64N(int64(l.Period) * 2)))
				case 1:
					clock.Advance(-time.Duration(rng.Int64N(int64(l.Period)))) // the clock steps back
				case 2, 3:
				default:
					clock.Advance(time.Duration(rng.Int64N(int64(step) + 1)))
				}
				cost := int64(1)
				switch rng.IntN(8) {
				case 0:
					cost = 0
				case 1:
					cost = rng.Int64N(l.Capacity() + 2)
				}
				want, err := mem.Take(ctx, key, l, cost)
				require.NoError(t, err)
				got, err := red.Take(ctx, key, l, cost)
				require.NoError(t, err)
				history = append(history, fmt.Sprintf("at %d cost %d: %+v", clock.Now().UnixMicro(), cost, want))
				if want != got {
					t.Fatalf("%s iter %d step %d: redis %+v\nhistory (memory):\n%s", l, iter, i, got, strings.Join(history[max(0, len(history)-8):], "\n"))
				}
			}
			mem.Close()
		}
	}
}
