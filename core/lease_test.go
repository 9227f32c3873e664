package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// leaseSpy records the Lease of every op and admission its Store sees.
type leaseSpy struct {
	core.Store
	mu   sync.Mutex
	ops  []time.Duration
	adms []time.Duration
}

func (s *leaseSpy) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	s.mu.Lock()
	for _, op := range ops {
		s.ops = append(s.ops, op.Lease)
	}
	s.mu.Unlock()
	return s.Store.Take(ctx, ops, out)
}

func (s *leaseSpy) Refund(ctx context.Context, a core.Admission) error {
	s.mu.Lock()
	s.adms = append(s.adms, a.Lease)
	s.mu.Unlock()
	return s.Store.Refund(ctx, a)
}

// A policy's Lease reaches every op and every admission made for it, by a
// request, a group, the key-level API and a refund, and no other policy's.
func TestPolicyLeaseReachesItsOps(t *testing.T) {
	mem, _ := frozen(t)
	spy := &leaseSpy{Store: mem}
	const hold = 250 * time.Millisecond
	l, err := core.NewLimiter(spy, []core.Policy{
		{Name: "leased", Key: keyfunc.Const("all"), Limit: core.PerSecond(100).WithAlgorithm(core.FixedWindow), Lease: hold, Refund: core.RefundFailed},
		{Name: "exact", Key: keyfunc.Const("all"), Limit: core.PerSecond(100), Refund: core.RefundFailed},
	})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.NoError(t, l.Refund(ctx, &d, 500))
	_, err = l.AllowN(ctx, "leased", "all", 1)
	require.NoError(t, err)
	_, err = l.CheckGroup(ctx, []core.GroupOp{{Policy: "exact", Identity: "x", Cost: 1}, {Policy: "leased", Identity: "x", Cost: 1}})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{hold, 0, hold, 0, hold}, spy.ops)
	require.ElementsMatch(t, []time.Duration{hold, 0}, spy.adms)
}

// A negative Lease, and any Lease of a sliding window log (its policy's
// limit or a tier's), are refused when the Limiter is built, naming the
// field.
func TestLeaseValidated(t *testing.T) {
	mem, _ := frozen(t)
	tiering := core.WithTiering(core.Tiering{Key: keyfunc.Const("k"), Resolve: func(context.Context, string) (string, error) { return "", nil }})
	log := core.PerSecond(10).WithAlgorithm(core.SlidingWindowLog)
	for _, c := range []struct {
		name string
		p    core.Policy
		want string
	}{
		{"negative", core.Policy{Limit: core.PerSecond(10), Lease: -time.Second}, `policy "p": Lease: must not be negative`},
		{"log", core.Policy{Limit: log, Lease: time.Second}, `policy "p": Lease: sliding_window_log cannot be leased`},
		{"log tier", core.Policy{Limit: core.PerSecond(10), Tiers: map[string]core.Limit{"gold": log}, Lease: time.Second}, `policy "p": tier "gold": Lease: sliding_window_log cannot be leased`},
	} {
		c.p.Name, c.p.Key = "p", keyfunc.Const("k")
		_, err := core.NewLimiter(mem, []core.Policy{c.p}, tiering)
		require.ErrorContains(t, err, c.want, c.name)
	}
	_, err := core.NewLimiter(mem, []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: log}}, tiering)
	require.NoError(t, err, "a log without a Lease")
	require.NoError(t, core.ValidateLease(time.Second, core.PerSecond(1).WithAlgorithm(core.SlidingWindowCounter)))
}
