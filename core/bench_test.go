package core_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// benchLimiter is a Limiter of n policies on a memory store, each a token
// bucket never emptied, keyed by the X-User header.
func benchLimiter(b *testing.B, n int) *core.Limiter {
	b.Helper()
	st, err := memorystore.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	var ps []core.Policy
	for i := range n {
		ps = append(ps, core.Policy{Name: "p" + strconv.Itoa(i), Key: keyfunc.Header("X-User"), Limit: core.PerSecond(1_000_000_000)})
	}
	l, err := core.NewLimiter(st, ps)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkLimiterDecide is one request's decision into a Decision the
// caller keeps (as the adapters do), under one and two policies, on a
// cancelable context (a server's), over 1024 users.
func BenchmarkLimiterDecide(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run("policies="+strconv.Itoa(n), func(b *testing.B) {
			l := benchLimiter(b, n)
			reqs := make([]keyfunc.Static, 1024)
			for i := range reqs {
				reqs[i] = keyfunc.Static{Headers: map[string][]string{"X-User": {"u" + strconv.Itoa(i)}}}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var d core.Decision
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := l.Decide(ctx, &reqs[i&1023], core.Call{}, &d); err != nil || !d.Allowed {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckGroup is one group of one and two ops, on a cancelable
// context, over 1024 identities.
func BenchmarkCheckGroup(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run("ops="+strconv.Itoa(n), func(b *testing.B) {
			l := benchLimiter(b, n)
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = "u" + strconv.Itoa(i)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ops := make([]core.GroupOp, n)
			for j := range ops {
				ops[j] = core.GroupOp{Policy: "p" + strconv.Itoa(j), Cost: 1}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for j := range ops {
					ops[j].Identity = ids[i&1023]
				}
				d, err := l.CheckGroup(ctx, ops)
				if err != nil || !d.Allowed {
					b.Fatal(err)
				}
			}
		})
	}
}
