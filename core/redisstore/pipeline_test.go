package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// stalledStore is a store on one redis-server reached through a proxy,
// with its round trips counted, the library loaded.
type stalledStore struct {
	srv   *redistest.Server
	proxy *redistest.Proxy
	s     *redisstore.Store
	trips *tripCounter
}

func newStalledStore(t *testing.T, opts ...redisstore.Option) *stalledStore {
	srv := redistest.StartServer(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	trips := &tripCounter{}
	client := srv.Client(t, func(o *redis.Options) { o.Addr, o.ContextTimeoutEnabled, o.PoolSize = proxy.Addr, true, 64 })
	client.AddHook(trips)
	s := newStore(t, client, append([]redisstore.Option{redisstore.WithTimeout(5 * time.Second)}, opts...)...)
	_, err := takeID(context.Background(), s, limitertest.Key(t).Identity, core.PerSecond(1), 1)
	require.NoError(t, err)
	st := &stalledStore{srv: srv, proxy: proxy, s: s, trips: trips}
	// One pipeline of two one-op calls, so that the store has asked INFO
	// whether it may send them as one decideMany call.
	var wg sync.WaitGroup
	st.holdFirst(t, &wg, limitertest.Key(t).Identity+"-warm")
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := takeID(context.Background(), s, fmt.Sprintf("%s-warm%d", limitertest.Key(t).Identity, i), core.PerSecond(1), 1)
			require.NoError(t, err)
		}()
	}
	require.Eventually(t, func() bool { return redisstore.QueuedCalls(s) == 2 }, 5*time.Second, time.Millisecond)
	proxy.Resume()
	wg.Wait()
	return st
}

// holdFirst stalls the proxy and starts one call, which takes the
// pipeline slot and stays in flight until the proxy resumes; it returns
// once the call was written.
func (st *stalledStore) holdFirst(t *testing.T, wg *sync.WaitGroup, id string) {
	before := st.trips.n.Load()
	st.proxy.Stall()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := takeID(context.Background(), st.s, id, core.PerHour(5), 1)
		require.NoError(t, err)
	}()
	require.Eventually(t, func() bool { return st.trips.n.Load() == before+1 }, 5*time.Second, time.Millisecond)
}

// Decisions made while a pipeline is in flight queue and go out together
// in one write, as one decideMany FCALL, when it returns; each caller gets
// its own answer (a limit of its own: 10+i per hour, so 9+i remaining).
// With two pipelines in flight (the old default) a call went alone on the
// second slot instead, and the calls never all queued.
func TestConcurrentCallsShareOneWrite(t *testing.T) {
	st := newStalledStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	base := limitertest.Key(t).Identity
	tripsBefore, fcallsBefore := st.trips.n.Load(), fcalls(t, st.srv)
	st.holdFirst(t, &wg, base+"-first")
	const n = 40
	results := make([]core.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = takeID(ctx, st.s, fmt.Sprintf("%s-%d", base, i), core.PerHour(int64(10+i)), 1)
		}()
	}
	require.Eventually(t, func() bool { return redisstore.QueuedCalls(st.s) == n }, 5*time.Second, time.Millisecond, "every call queued behind the one in flight")
	st.proxy.Resume()
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "call %d", i)
		require.True(t, results[i].Allowed, "call %d", i)
		require.Equal(t, int64(10+i), results[i].Capacity, "call %d: another caller's answer", i)
		require.Equal(t, int64(9+i), results[i].Remaining, "call %d", i)
	}
	require.Equal(t, tripsBefore+2, st.trips.n.Load(), "the first call, then one pipeline for the %d queued", n)
	require.Equal(t, fcallsBefore+2, fcalls(t, st.srv), "the queued one-op calls in one decideMany")
}

// A decision whose caller leaves while it is queued is never sent: its key
// is untouched; the queued decisions whose callers stayed are made.
func TestCancelledQueuedCallIsNeverSent(t *testing.T) {
	st := newStalledStore(t)
	var wg sync.WaitGroup
	base := limitertest.Key(t).Identity
	st.holdFirst(t, &wg, base+"-first")
	const n = 20
	errs := make([]error, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = takeID(ctx, st.s, fmt.Sprintf("%s-%d", base, i), core.PerHour(5), 1)
		}()
	}
	require.Eventually(t, func() bool { return redisstore.QueuedCalls(st.s) == n }, 5*time.Second, time.Millisecond)
	for i := 0; i < n; i += 2 {
		cancels[i]()
	}
	st.proxy.Resume()
	wg.Wait()
	direct := st.srv.Client(t)
	for i := range n {
		cancels[i]()
		exists, err := direct.Exists(context.Background(), st.s.Key(keyOf(fmt.Sprintf("%s-%d", base, i)), core.TokenBucket)).Result()
		require.NoError(t, err)
		if i%2 == 0 {
			require.ErrorIs(t, errs[i], context.Canceled, "call %d", i)
			require.Zero(t, exists, "call %d was cancelled in the queue, and consumed", i)
		} else {
			require.NoError(t, errs[i], "call %d", i)
			require.Equal(t, int64(1), exists, "call %d", i)
		}
	}
}

// On a Cluster each node has its own pipeline: while one master is
// partitioned (its connections black-holed, no FIN), decisions for keys
// on the other masters are made at once, and those for the partitioned
// one fail at their deadline, naming the node; after the partition heals,
// its keys are decided again.
func TestClusterStalledNodeDelaysNoOther(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	stalled := cluster.Nodes[0]
	proxy := redistest.NewProxy(t, stalled.Addr)
	stalledTrips := &tripCounter{}
	client := cluster.Client(t, func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled, o.MaxRedirects, o.PoolSize = true, 1, 64
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == stalled.Addr {
				addr = proxy.Addr
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	client.OnNewNode(func(n *redis.Client) {
		if n.Options().Addr == stalled.Addr {
			n.AddHook(stalledTrips)
		}
	})
	const timeout = 300 * time.Millisecond
	s := newStore(t, client, redisstore.WithTimeout(timeout))
	ctx := context.Background()
	// Identities on each node, the library loaded on every master.
	base := limitertest.Key(t).Identity
	onNode := map[*redistest.Server][]string{}
	for i := 0; len(onNode[cluster.Nodes[0]]) < 8 || len(onNode[cluster.Nodes[1]]) < 8 || len(onNode[cluster.Nodes[2]]) < 8; i++ {
		id := fmt.Sprintf("%s-%d", base, i)
		node := cluster.NodeForKey(s.Key(keyOf(id), core.TokenBucket))
		onNode[node] = append(onNode[node], id)
	}
	for _, ids := range onNode {
		require.Eventually(t, func() bool { _, err := takeID(ctx, s, ids[0], core.PerHour(100), 1); return err == nil }, 10*time.Second, 10*time.Millisecond)
	}

	proxy.Stall()
	defer proxy.Resume()
	before := stalledTrips.n.Load()
	var wg sync.WaitGroup
	stalledErrs := make([]error, len(onNode[stalled]))
	for i, id := range onNode[stalled] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, stalledErrs[i] = takeID(ctx, s, id, core.PerHour(100), 1)
		}()
	}
	require.Eventually(t, func() bool { return stalledTrips.n.Load() > before }, 5*time.Second, time.Millisecond, "a pipeline in flight to the stalled node")
	start := time.Now()
	for _, node := range cluster.Nodes[1:] {
		for _, id := range onNode[node] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := takeID(ctx, s, id, core.PerHour(100), 1)
				require.NoError(t, err, "a live node's call")
				require.True(t, r.Allowed)
				require.Less(t, time.Since(start), timeout, "a live node's call waited for the stalled one")
			}()
		}
	}
	wg.Wait()
	for i, err := range stalledErrs {
		require.ErrorIs(t, err, context.DeadlineExceeded, "stalled call %d", i)
		var ne *redisstore.NodeError
		require.ErrorAs(t, err, &ne)
		require.Equal(t, stalled.Addr, ne.FailedNode())
	}
	proxy.Resume()
	require.Eventually(t, func() bool {
		_, err := takeID(ctx, s, onNode[stalled][0], core.PerHour(100), 1)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
}

// 64 concurrent callers on one server, Sentinel's master and a 3-master
// Cluster make fewer round trips than decisions, every decision its own
// (a fresh key each: allowed with the limit's capacity less one).
func TestConcurrentCallersPipelineEverywhere(t *testing.T) {
	topologies := []struct {
		name   string
		client func(t *testing.T, trips *tripCounter) redis.UniversalClient
	}{
		{"single", func(t *testing.T, trips *tripCounter) redis.UniversalClient {
			c := redistest.StartServer(t).Client(t, func(o *redis.Options) { o.PoolSize = 64 })
			c.AddHook(trips)
			return c
		}},
		{"sentinel", func(t *testing.T, trips *tripCounter) redis.UniversalClient {
			c := redistest.StartSentinel(t).Client(t, func(o *redis.FailoverOptions) { o.PoolSize = 64 })
			c.AddHook(trips)
			return c
		}},
		{"cluster", func(t *testing.T, trips *tripCounter) redis.UniversalClient {
			c := shared.Cluster(t).Client(t, func(o *redis.ClusterOptions) { o.PoolSize = 64 })
			c.OnNewNode(func(n *redis.Client) { n.AddHook(trips) })
			return c
		}},
	}
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			trips := &tripCounter{}
			s := newStore(t, tc.client(t, trips), redisstore.WithTimeout(5*time.Second))
			ctx := context.Background()
			base := limitertest.Key(t).Identity
			require.Eventually(t, func() bool { _, err := takeID(ctx, s, base, core.PerHour(5), 1); return err == nil }, 10*time.Second, 10*time.Millisecond)
			const callers, each = 64, 20
			before := trips.n.Load()
			start := make(chan struct{})
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range each {
						r, err := takeID(ctx, s, fmt.Sprintf("%s-%d-%d", base, g, i), core.PerHour(int64(10+g)), 1)
						require.NoError(t, err)
						require.Equal(t, int64(9+g), r.Remaining, "caller %d: another caller's answer", g)
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Less(t, trips.n.Load()-before, int64(callers*each/2), "round trips for %d decisions", callers*each)
		})
	}
}
