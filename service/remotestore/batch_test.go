package remotestore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// methodCounter counts the RPCs a server answered, by method.
type methodCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *methodCounter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	m.mu.Lock()
	m.n[info.FullMethod]++
	m.mu.Unlock()
	return h(ctx, req)
}

func (m *methodCounter) get(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[method]
}

// Concurrent Takes beyond the RPCs in flight are coalesced into TakeBatch
// RPCs, and each is still decided all or nothing on its own: on a shared
// limit exactly the limit is admitted, a group denied by one op consumes
// nothing, and a bad Take in a batch fails alone, with its own sentinel.
func TestBatching(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	counter := &methodCounter{n: map[string]int{}}
	srv := serveGRPC(t, memory(t, nil), "127.0.0.1:0", []grpc.ServerOption{grpc.UnaryInterceptor(counter.intercept)})
	s := remotestore.New(dial(t, srv.addr), remotestore.WithBatching(1, 8))

	shared := core.Key{Identity: "shared", Policy: "p"}
	tight := core.Key{Identity: "tight", Policy: "p"}
	sharedL, tightL := core.Per(100, 24*time.Hour), core.Per(5, 24*time.Hour)
	const workers, each = 32, 10
	var singles, allowed, groupAllowed, badTried, invalid atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			out := make([]core.Result, 2)
			for i := range each {
				switch (w + i) % 3 {
				case 0: // a bad Take
					badTried.Add(1)
					err := s.Take(ctx, []core.Op{{Key: core.Key{Identity: "bad"}, Limit: tightL, Cost: -1}}, out[:1])
					if assert.ErrorIs(t, err, core.ErrInvalidCost) {
						invalid.Add(1)
					}
				case 1: // a group: the shared key and a tight one
					err := s.Take(ctx, []core.Op{{Key: shared, Limit: sharedL, Cost: 1}, {Key: tight, Limit: tightL, Cost: 1}}, out)
					assert.NoError(t, err)
					if err == nil && out[0].Allowed && out[1].Allowed {
						groupAllowed.Add(1)
					}
				default:
					singles.Add(1)
					err := s.Take(ctx, []core.Op{{Key: shared, Limit: sharedL, Cost: 1}}, out[:1])
					assert.NoError(t, err)
					if err == nil && out[0].Allowed {
						allowed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, badTried.Load(), invalid.Load(), "every bad Take failed alone")
	require.GreaterOrEqual(t, singles.Load(), int64(100))
	require.Equal(t, int64(100), allowed.Load()+groupAllowed.Load(), "the shared key admits its limit exactly")
	require.LessOrEqual(t, groupAllowed.Load(), int64(5))
	r, err := limitertest.TakeOne(ctx, s, tight, tightL, 0)
	require.NoError(t, err)
	require.Equal(t, 5-groupAllowed.Load(), r.Remaining, "a group denied on the shared key took nothing from the tight one")
	require.Positive(t, counter.get(ratelimitv1.StoreService_TakeBatch_FullMethodName), "no Take was coalesced")
	t.Logf("Take RPCs %d, TakeBatch RPCs %d for %d Takes", counter.get(ratelimitv1.StoreService_Take_FullMethodName),
		counter.get(ratelimitv1.StoreService_TakeBatch_FullMethodName), workers*each)
}

// A queued Take whose context ends before its batch is sent returns the
// context's error at once, and is never sent: it consumes nothing.
func TestBatchingAbandoned(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	backend := memory(t, nil)
	srv := serve(t, backend, "127.0.0.1:0")
	proxy := redistest.NewProxy(t, srv.addr)
	// sent counts the RPCs the client starts (a Take holds its slot first).
	var sent atomic.Int32
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent.Add(1)
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(proxy.Addr, append(remotestore.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(count))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	s := remotestore.New(conn, remotestore.WithBatching(1, 8))
	k, l := core.Key{Identity: "abandoned", Policy: "p"}, core.PerMinute(10)
	_, err = limitertest.TakeOne(ctx, s, k, l, 1) // connect
	require.NoError(t, err)

	proxy.Stall()
	first := make(chan error, 1)
	go func() { // holds the one slot while the network is stalled
		_, err := limitertest.TakeOne(ctxT(t, time.Second), s, k, l, 1)
		first <- err
	}()
	require.Eventually(t, func() bool { return sent.Load() == 2 }, 5*time.Second, time.Millisecond, "the first Take holds the slot")
	start := time.Now()
	_, err = limitertest.TakeOne(ctxT(t, 100*time.Millisecond), s, k, l, 5)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second)
	proxy.Resume()
	<-first

	// The abandoned Take of 5 was never sent.
	r, err := limitertest.TakeOne(ctx, backend, k, l, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r.Remaining, int64(8))
	require.Equal(t, int32(2), sent.Load(), "no RPC carried the abandoned Take")
}
