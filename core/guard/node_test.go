package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/memorystore"
)

// sharded is a real memory store whose keys live on nodes named by the
// first byte of their identity ("a", "b", "c"), any of which can be made to
// fail with an error naming it, as the Redis store's do on a Cluster.
type sharded struct {
	core.Store // a memory store
	dead       sync.Map
	calls      atomic.Int64
}

type nodeErr struct{ node string }

func (e nodeErr) Error() string      { return "node " + e.node + ": connection refused" }
func (e nodeErr) FailedNode() string { return e.node }

var _ guard.NodeError = nodeErr{}

func (s *sharded) Node(k core.Key) string { return k.Identity[:1] }

func (s *sharded) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	s.calls.Add(1)
	for _, op := range ops {
		if _, dead := s.dead.Load(s.Node(op.Key)); dead {
			return nodeErr{s.Node(op.Key)}
		}
	}
	return s.Store.Take(ctx, ops, out)
}

// nodeTransitions counts Closed -> Open per node.
type nodeTransitions struct {
	mu     sync.Mutex
	opened map[string]int
}

func (o *nodeTransitions) CircuitChanged(from, to guard.Circuit) {}
func (o *nodeTransitions) BackendFailed(guard.ErrorKind, error)  {}
func (o *nodeTransitions) NodeCircuitChanged(node string, from, to guard.Circuit) {
	if from == guard.Closed && to == guard.Open {
		o.mu.Lock()
		o.opened[node]++
		o.mu.Unlock()
	}
}

// Random singles and groups over three nodes from 16 goroutines while node
// b is dead: in every mode, no op on a live node is ever answered by the
// failure mode except in a group with b under fail-closed or fallback; b's
// circuit opens once and no other does; groups on live nodes stay all or
// nothing. Once b is back, its circuit closes after the cooldown.
func TestOneCircuitPerNode(t *testing.T) {
	for _, mode := range []string{"open", "closed", "fallback"} {
		t.Run(mode, func(t *testing.T) {
			clock := limitertest.NewClock()
			m, err := memorystore.New(memorystore.WithClock(clock.Now))
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			backend := &sharded{Store: m}
			rec := &nodeTransitions{opened: map[string]int{}}
			opts := []guard.Option{guard.WithClock(clock.Now), guard.WithObserver(rec),
				guard.WithBreaker(guard.Breaker{Failures: 3, Cooldown: time.Second})}
			switch mode {
			case "closed":
				opts = append(opts, guard.WithFailClosed(0))
			case "fallback":
				opts = append(opts, guard.WithFallback(1))
			}
			g := newGuard(t, backend, opts...)
			backend.dead.Store("b", true)
			var beforeOpen atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					ctx := context.Background()
					lim := core.PerHour(1_000_000)
					for i := range 300 {
						n := 1 + rng.IntN(3)
						ops := make([]core.Op, n)
						withB := false
						for j := range ops {
							node := "abc"[rng.IntN(3)]
							withB = withB || node == 'b'
							ops[j] = core.Op{Key: core.Key{Identity: fmt.Sprintf("%c%d-%d", node, w, i), Policy: fmt.Sprint("p", j)}, Limit: lim, Cost: 1}
						}
						out := make([]core.Result, n)
						if n == 1 {
							r, err := limitertest.TakeOne(ctx, g, ops[0].Key, lim, 1)
							if err != nil {
								errs <- err
								return
							}
							out[0] = r
						} else if err := g.Take(ctx, ops, out); err != nil {
							errs <- err
							return
						}
						early := false // a group with b failed as a whole before b's circuit opened
						for j, op := range ops {
							live := !strings.HasPrefix(op.Key.Identity, "b")
							fromStore := out[j].Source == core.FromStore
							switch {
							case live && !fromStore && withB && mode == "open":
								if !early {
									early = true
									beforeOpen.Add(1)
								}
							case live && !fromStore && (mode == "open" || !withB):
								errs <- fmt.Errorf("op %q on a live node answered by %s: %+v", op.Key, out[j].Source, out)
								return
							case !live && fromStore:
								errs <- fmt.Errorf("op %q on the dead node decided by the store", op.Key)
								return
							case !out[j].Allowed:
								if mode != "closed" {
									errs <- fmt.Errorf("op %q denied: %+v", op.Key, out[j])
									return
								}
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			// Only while b's circuit was still closed (its first failures,
			// and the calls in flight when it opened) did a group with b
			// fail as a whole.
			require.LessOrEqual(t, beforeOpen.Load(), int64(16+3), "groups with b answered by the mode as a whole")
			rec.mu.Lock()
			require.Equal(t, map[string]int{"b": 1}, rec.opened, "only b's circuit opened, once")
			rec.mu.Unlock()
			c := g.Circuits()
			require.Equal(t, guard.Open, c["b"])
			require.Equal(t, guard.Closed, c["a"])
			require.Equal(t, guard.Closed, c["c"])
			require.Equal(t, guard.Open, g.Circuit(), "the most open circuit")

			backend.dead.Delete("b")
			clock.Advance(time.Second)
			r, err := takeID(context.Background(), g, "b-back\x00p", core.PerHour(1), 1)
			require.NoError(t, err)
			require.Equal(t, core.FromStore, r.Source, "the probe reaches b again")
			require.Equal(t, guard.Closed, g.Circuits()["b"])
			require.Equal(t, guard.Closed, g.Circuit())
			require.False(t, errors.Is(err, context.Canceled))
		})
	}
}
