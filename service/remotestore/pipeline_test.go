package remotestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/schedlag"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
	"github.com/sluicehq/sluice/service/remotestore"
)

// The ratelimitd binary, built once by the first test that needs it.
var (
	ratelimitdOnce sync.Once
	ratelimitdBin  string
	ratelimitdDir  string
	ratelimitdErr  error
)

func ratelimitd(t *testing.T) string {
	t.Helper()
	ratelimitdOnce.Do(func() {
		ratelimitdDir, ratelimitdErr = os.MkdirTemp("", "remotestore-ratelimitd-")
		if ratelimitdErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		ratelimitdBin, ratelimitdErr = ratelimitdtest.Build(ctx, filepath.Join("..", "cmd", "ratelimitd"), ratelimitdDir)
	})
	require.NoError(t, ratelimitdErr)
	return ratelimitdBin
}

// removeRatelimitd removes the binary built, if any.
func removeRatelimitd() {
	if ratelimitdDir != "" {
		_ = os.RemoveAll(ratelimitdDir)
	}
}

// rpcCounter counts the RPCs a client started, by method.
type rpcCounter struct{ take, batch atomic.Int64 }

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case "/sluice.ratelimit.v1.StoreService/Take":
		c.take.Add(1)
	case "/sluice.ratelimit.v1.StoreService/TakeBatch":
		c.batch.Add(1)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// stalledRemote is a remote store on a real ratelimitd (on a real
// redis-server) reached through a proxy, its RPCs counted.
type stalledRemote struct {
	proxy *redistest.Proxy
	s     *remotestore.Store
	rpcs  *rpcCounter
}

func newStalledRemote(t *testing.T) *stalledRemote {
	srv := redistest.StartServer(t)
	// Not about Redis's latency: the default --store-timeout (5 ms) fails
	// open on a loaded machine, and a peek that failed open reads 0 left.
	p := ratelimitdtest.Start(t, ratelimitd(t), nil, "--redis", srv.Addr, "--store-timeout", "5s")
	proxy := redistest.NewProxy(t, p.GRPCAddr)
	rpcs := &rpcCounter{}
	conn, err := grpc.NewClient(proxy.Addr, append(remotestore.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(rpcs.intercept))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	s := remotestore.New(conn)
	ctx := ctxT(t, 10*time.Second)
	_, err = limitertest.TakeOne(ctx, s, limitertest.Key(t), core.PerHour(5), 1)
	require.NoError(t, err)
	return &stalledRemote{proxy: proxy, s: s, rpcs: rpcs}
}

// holdSlots stalls the proxy and fills every slot (DefaultInflight) with
// a Take in flight, held until the proxy resumes.
func (r *stalledRemote) holdSlots(t *testing.T, wg *sync.WaitGroup) {
	before := r.rpcs.take.Load()
	r.proxy.Stall()
	for i := range remotestore.DefaultInflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := core.Key{Identity: fmt.Sprintf("%s-held-%d", t.Name(), i), Policy: "p"}
			_, err := limitertest.TakeOne(ctxT(t, 20*time.Second), r.s, k, core.PerHour(5), 1)
			require.NoError(t, err)
		}()
	}
	require.Eventually(t, func() bool { return r.rpcs.take.Load() == before+remotestore.DefaultInflight }, 5*time.Second, time.Millisecond)
}

// Takes that queue while every slot is busy go to ratelimitd in one
// TakeBatch RPC, each answered with its own result (a limit of its own);
// a Take whose caller left while it was queued is never sent: its key
// is fresh afterwards.
func TestQueuedTakesShareOneBatch(t *testing.T) {
	r := newStalledRemote(t)
	var wg sync.WaitGroup
	r.holdSlots(t, &wg)
	const n = 30
	keys := make([]core.Key, n)
	results := make([]core.Result, n)
	errs := make([]error, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		keys[i] = core.Key{Identity: fmt.Sprintf("%s-%d", t.Name(), i), Policy: "p"}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cancels[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = limitertest.TakeOne(ctx, r.s, keys[i], core.PerHour(int64(10+i)), 1)
		}()
	}
	require.Eventually(t, func() bool { return remotestore.QueuedTakes(r.s) == n }, 5*time.Second, time.Millisecond)
	for i := 0; i < n; i += 3 {
		cancels[i]()
	}
	r.proxy.Resume()
	wg.Wait()
	require.Equal(t, int64(1), r.rpcs.batch.Load(), "one TakeBatch for the queue")
	ctx := ctxT(t, 10*time.Second)
	for i := range n {
		cancels[i]()
		if i%3 == 0 {
			require.ErrorIs(t, errs[i], context.Canceled, "Take %d", i)
			peek, err := limitertest.TakeOne(ctx, r.s, keys[i], core.PerHour(int64(10+i)), 0)
			require.NoError(t, err)
			require.Equal(t, int64(10+i), peek.Remaining, "Take %d was cancelled in the queue, and consumed", i)
			continue
		}
		require.NoError(t, errs[i], "Take %d", i)
		require.Equal(t, int64(10+i), results[i].Capacity, "Take %d: another Take's answer", i)
		require.Equal(t, int64(9+i), results[i].Remaining, "Take %d", i)
	}
}

// While ratelimitd is unreachable (a partition: no FIN, bytes held), each
// queued Take returns at its own deadline, spread over 200 ms, and none is
// sent: after the partition heals their keys are fresh.
func TestQueuedTakesExpireOnTime(t *testing.T) {
	r := newStalledRemote(t)
	var wg sync.WaitGroup
	r.holdSlots(t, &wg)
	lag := schedlag.Start(t)
	const n = 10
	start := time.Now()
	keys := make([]core.Key, n)
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var queued sync.WaitGroup
	for i := range n {
		keys[i] = core.Key{Identity: fmt.Sprintf("%s-%d", t.Name(), i), Policy: "p"}
		deadline := start.Add(100*time.Millisecond + time.Duration(i)*20*time.Millisecond)
		queued.Add(1)
		go func() {
			defer queued.Done()
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			_, errs[i] = limitertest.TakeOne(ctx, r.s, keys[i], core.PerHour(5), 1)
			took[i] = time.Since(start)
		}()
	}
	queued.Wait()
	slack := 100*time.Millisecond + lag.Max()
	for i := range n {
		want := 100*time.Millisecond + time.Duration(i)*20*time.Millisecond
		require.ErrorIs(t, errs[i], context.DeadlineExceeded, "Take %d", i)
		require.GreaterOrEqual(t, took[i], want, "Take %d returned before its deadline", i)
		require.LessOrEqual(t, took[i], want+slack, "Take %d, slack %s", i, slack)
	}
	r.proxy.Resume()
	wg.Wait()
	ctx := ctxT(t, 10*time.Second)
	for i := range n {
		peek, err := limitertest.TakeOne(ctx, r.s, keys[i], core.PerHour(5), 0)
		require.NoError(t, err)
		require.Equal(t, int64(5), peek.Remaining, "Take %d expired in the queue, and was sent", i)
	}
}
