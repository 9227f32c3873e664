package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// stores are the real stores every behaviour is checked on: the memory
// store and a Redis store on a real redis-server (one per test, flushed
// for each store made).
func stores(t *testing.T) map[string]func(t *testing.T) core.Store {
	t.Helper()
	addr := redistest.StartServer(t).Addr
	return map[string]func(t *testing.T) core.Store{
		"memory": func(t *testing.T) core.Store { return memStore(t) },
		"redis": func(t *testing.T) core.Store {
			return redisStore(t, addr)
		},
	}
}

func redisStore(t testing.TB, addr string, opts ...redisstore.Option) core.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.FlushAll(context.Background()).Err())
	// A generous timeout: the test machine is shared (a later option wins).
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return s
}

// fixedClock is a clock that moves only when told to.
type fixedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fixedClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// source is a rules.Source whose snapshots a test hands over: Load returns
// the first, Watch applies each one sent on next (and reports each error
// sent on bad) until ctx ends.
type source struct {
	first *rules.Snapshot
	next  chan *rules.Snapshot
	bad   chan error
}

func newSource(s *rules.Snapshot) *source {
	return &source{first: s, next: make(chan *rules.Snapshot), bad: make(chan error)}
}

func (s *source) Load(context.Context) (*rules.Snapshot, error) { return s.first, nil }

func (s *source) Watch(ctx context.Context, apply func(*rules.Snapshot) error, onError func(error)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-s.next:
			_ = apply(snap) // a refusal is the engine's to report
		case err := <-s.bad:
			onError(err)
		}
	}
}

func parse(t testing.TB, yaml string) *rules.Snapshot {
	t.Helper()
	s, err := rules.Parse("rules.yaml", []byte(yaml))
	require.NoError(t, err)
	return s
}

func mustCheck(t testing.TB, e *engine.Engine, c engine.Check) engine.Result {
	t.Helper()
	r, err := e.Check(context.Background(), c)
	require.NoError(t, err)
	return r
}
