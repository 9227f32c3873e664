package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/schedlag"
)

// 64 goroutines on one standalone server, one hot key per algorithm and
// many cold ones: exactly the capacity of the hot key is admitted, and every
// cold key admits its first request. On a server that answers INFO the
// pipelined one-op calls go several to an FCALL; where INFO is refused (as
// by a proxy), one each, with the same answers.
func TestConcurrentCallsAreExact(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		user    string
		batched bool
	}{
		{"batched", "", true},
		{"INFO refused", "noinfo", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			require.NoError(t, srv.Client(t).Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err())
			client := srv.Client(t, func(o *redis.Options) {
				if tc.user != "" {
					o.Username, o.Password = tc.user, "pw"
				}
			})
			s := newStore(t, client, redisstore.WithTimeout(5*time.Second))
			const callers, each = 64, 12
			decisions := 0
			fcallsBefore := fcalls(t, srv)
			for _, a := range limitertest.Algorithms {
				l := core.Per(300, time.Hour).WithAlgorithm(a)
				hot := limitertest.Key(t).Identity
				var admitted atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, callers)
				for g := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range each {
							key, cold := hot, i%2 == 1
							if cold {
								key = fmt.Sprintf("%s-cold-%d-%d", hot, g, i)
							}
							r, err := takeID(ctx, s, key, l, 1)
							if err != nil {
								errs <- err
								return
							}
							switch {
							case cold && !r.Allowed:
								errs <- fmt.Errorf("%s: a fresh key denied: %+v", a, r)
								return
							case !cold && r.Allowed:
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				require.Equal(t, int64(300), admitted.Load(), "%s: admitted of %d", a, callers*each/2)
				decisions += callers * each
			}
			calls := fcalls(t, srv) - fcallsBefore
			if tc.batched {
				require.Less(t, calls, int64(decisions)/2, "calls for %d decisions", decisions)
			} else { // one each (and the first ones again, once the library is loaded)
				require.GreaterOrEqual(t, calls, int64(decisions))
			}
		})
	}
}

// A call that fails in a batch fails alone, with its own error; the others
// in the same FCALL are decided.
func TestBatchedCallFailsAlone(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	s := newStore(t, client, redisstore.WithTimeout(5*time.Second))
	ctx := context.Background()
	bad := limitertest.Key(t).Identity
	require.NoError(t, client.HSet(ctx, s.Key(keyOf(bad), core.TokenBucket), "x", 1).Err())
	before := fcalls(t, srv)
	var ok, wrongType atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				key := fmt.Sprintf("%s-%d-%d", bad, g, i)
				if i%5 == 0 {
					key = bad
				}
				_, err := takeID(ctx, s, key, core.PerSecond(1_000_000), 1)
				switch {
				case err == nil && key != bad:
					ok.Add(1)
				case err != nil && key == bad && strings.Contains(err.Error(), "WRONGTYPE"):
					wrongType.Add(1)
				default:
					errs <- fmt.Errorf("key %q: %v", key, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	require.Equal(t, int64(64*16), ok.Load())
	require.Equal(t, int64(64*4), wrongType.Load())
	require.Less(t, fcalls(t, srv)-before, int64(64*20), "some calls were batched")
}

// fcalls returns how many FCALLs srv has run.
func fcalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	return scriptCalls(t, srv.Client(t))["fcall"]
}

// While the server stalls (a proxy stops forwarding bytes both ways, at
// once, as a frozen server or a black-holed network; the stall ends after
// 600ms), calls queued behind the pipelines in flight, and those in flight,
// return at their own deadline; the store then works again.
func TestQueuedCallsExpireOnTime(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	for _, honours := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			proxy := redistest.NewProxy(t, srv.Addr)
			client := srv.Client(t, func(o *redis.Options) {
				o.Addr, o.ContextTimeoutEnabled, o.PoolSize = proxy.Addr, honours, 32
			})
			s := newStore(t, client, redisstore.WithTimeout(100*time.Millisecond))
			// The first call loads the library (a retry when this machine
			// stalls past the timeout).
			require.Eventually(t, func() bool {
				_, err := takeID(ctx, s, limitertest.Key(t).Identity, core.PerSecond(1), 1)
				return err == nil
			}, 10*time.Second, time.Millisecond)
			proxy.Stall()
			stall := time.AfterFunc(600*time.Millisecond, proxy.Resume)
			defer stall.Stop()
			defer proxy.Resume()
			lag := schedlag.Start(t)
			type call struct {
				took time.Duration
				err  error
			}
			calls := make([]call, 16)
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(g) * 5 * time.Millisecond) // deadlines spread over 80ms
					start := time.Now()
					_, err := takeID(ctx, s, fmt.Sprintf("%s-%d", limitertest.Key(t).Identity, g), core.PerSecond(1), 1)
					calls[g] = call{time.Since(start), err}
				}()
			}
			wg.Wait()
			// A call returns at its own deadline, not at the end of the
			// stall (600ms) nor after the deadline of a pipeline ahead of it
			// (another 100ms): 60ms of slack, plus however late this
			// process's goroutines woke up meanwhile on a loaded machine.
			slack := 60*time.Millisecond + lag.Max()
			for g, c := range calls {
				require.ErrorIs(t, c.err, context.DeadlineExceeded, "call %d", g)
				require.GreaterOrEqual(t, c.took, 90*time.Millisecond, "call %d returned before its deadline", g)
				require.LessOrEqual(t, c.took, 100*time.Millisecond+slack, "call %d, want about 100ms (slack %s)", g, slack)
			}
			proxy.Resume() // the stall ends, if it has not yet
			require.Eventually(t, func() bool {
				_, err := takeID(ctx, s, limitertest.Key(t).Identity, core.PerSecond(1), 1)
				return err == nil
			}, 5*time.Second, 10*time.Millisecond)
		})
	}
}
