package remotestore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/lease"
	"github.com/sluicehq/sluice/service/remotestore"
)

// The lease layer over the remote store: two app instances, each a lease
// layer over its own connection to one ratelimitd store service, decide a
// hot key from four goroutines each, at many times its limit. No window
// counts more than the limit, and the service is called for a small share
// of the decisions.
func TestLeasedOverRemote(t *testing.T) {
	srv := serve(t, memory(t, nil), "127.0.0.1:0")
	l := core.Per(300, 50*time.Millisecond).WithAlgorithm(core.FixedWindow)
	key := core.Key{Identity: "hot", Policy: "p"}
	var mu sync.Mutex
	perWindow := map[int64]int64{}
	decisions := 0
	var stores []*lease.Store
	var wg sync.WaitGroup
	stop := time.Now().Add(400 * time.Millisecond)
	for range 2 {
		ls, err := lease.New(remotestore.New(dial(t, srv.addr)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = ls.Close() })
		stores = append(stores, ls)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ops := []core.Op{{Key: key, Limit: l, Cost: 1, Lease: 20 * time.Millisecond}}
				out := make([]core.Result, 1)
				n := 0
				for ; time.Now().Before(stop); n++ {
					if err := ls.Take(context.Background(), ops, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed {
						mu.Lock()
						perWindow[out[0].At/50_000]++
						mu.Unlock()
					}
				}
				mu.Lock()
				decisions += n
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	calls := uint64(0)
	for _, s := range stores {
		st := s.Stats()
		calls += st.Takes + st.PassedThrough + st.GivenBack
	}
	for w, n := range perWindow {
		require.LessOrEqual(t, n, l.Rate, "window %d", w)
	}
	t.Logf("%d decisions, %d calls of the service, %d windows", decisions, calls, len(perWindow))
	require.Less(t, float64(calls), 0.2*float64(decisions), "decided in memory")
}
