package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// widest is a real store that records the most ops any one Take carried.
type widest struct {
	core.Store
	most atomic.Int64
}

func (w *widest) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	for {
		m := w.most.Load()
		if int64(len(ops)) <= m || w.most.CompareAndSwap(m, int64(len(ops))) {
			break
		}
	}
	return w.Store.Take(ctx, ops, out)
}

// TestUsageOfManyRulesInSmallStoreCalls: the usage of a caller under
// 3000 rules is read in store calls of at most 512 counters (one call of
// them all held a Redis shared by every instance: with 20 000 rules a
// concurrent check waited 74 ms, 4 ms after), every rule reported.
func TestUsageOfManyRulesInSmallStoreCalls(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  - name: r%d\n    dimension: user\n    endpoints: [/e%d/**]\n    rate: 10\n    period: 1m\n", i, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ms, err := memorystore.New()
	require.NoError(t, err)
	defer ms.Close()
	st := &widest{Store: ms}
	e, err := engine.New(ctx, st, rules.NewBytes("many.yaml", []byte(b.String())))
	require.NoError(t, err)
	_, err = e.Check(ctx, engine.Check{Dimension: "user", Identifier: "alice", Endpoint: "/e2999/x", Cost: 3})
	require.NoError(t, err)
	st.most.Store(0)
	u, err := e.Usage(ctx, "user", "alice")
	require.NoError(t, err)
	require.Len(t, u, 3000)
	require.LessOrEqual(t, st.most.Load(), int64(512))
	require.Equal(t, "r2999", u[2999].Rule.ID)
	require.Equal(t, int64(3), u[2999].Used)
	require.Equal(t, int64(0), u[0].Used)
}
