package servicebench_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/remotestore"
)

// TestRemoteStoreDecider drives the remote store implementation's decider
// against a StoreService on loopback (here in this process, on a memory
// store) and checks that its decisions are the server's.
func TestRemoteStoreDecider(t *testing.T) {
	st, err := memorystore.New()
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	counted := &countingStore{Store: st}
	remotestore.NewServer(counted).Register(gs)
	go gs.Serve(l)
	defer gs.Stop()

	conns, err := servicebench.Dial(l.Addr().String(), 1)
	require.NoError(t, err)
	defer conns[0].Close()
	im := implNamed(t, "remotestore")
	users := servicebench.Users(20)
	d, done, err := im.NewDecider(servicebench.Conn{GRPC: conns, Users: users, Callers: 4})
	require.NoError(t, err)
	defer done()

	lr := redisbench.Load(context.Background(), d, redisbench.LoadConfig{Callers: 4, Keys: users, N: 400})
	require.NoError(t, lr.FirstErr)
	require.EqualValues(t, 400, lr.Decisions)
	require.Zero(t, lr.Denied, "a limit of %s is not reached", servicebench.StoreLimit)

	// The decisions were the server store's, one op each.
	require.EqualValues(t, 400, counted.ops.Load())
}

// countingStore counts the ops its store takes.
type countingStore struct {
	core.Store
	ops atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	c.ops.Add(int64(len(ops)))
	return c.Store.Take(ctx, ops, out)
}
