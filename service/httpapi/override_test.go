package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/rules"
)

// swapSource is a rules.Source whose later snapshots a test sends on next.
type swapSource struct {
	first *rules.Snapshot
	next  chan *rules.Snapshot
}

func (s *swapSource) Load(context.Context) (*rules.Snapshot, error) { return s.first, nil }

func (s *swapSource) Watch(ctx context.Context, apply func(*rules.Snapshot) error, onError func(error)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-s.next:
			if err := apply(snap); err != nil {
				onError(err)
			}
		}
	}
}

// appliedRevisions is an engine.OverridesObserver that hands over the
// revision of every snapshot whose overrides were applied.
type appliedRevisions chan string

func (a appliedRevisions) Decided(context.Context, *engine.Event) {}
func (a appliedRevisions) Reloaded(*rules.Snapshot, error)        {}
func (a appliedRevisions) OverridesApplied(s *rules.Snapshot, _, _ int, err error) {
	if err == nil {
		a <- s.Revision()
	}
}

// TestRetryAfterUnderOverrides: a caller under a block, or under a raise
// it has spent, is told by the HTTP front door the wait of its key as a
// whole: the key's own state decides once the override ends. alice, drained
// under her own 5 a minute 30 s before her window ends, then blocked for a
// second, is told Retry-After 30 (and retry_after 30, RateLimit t=30,
// reset_at the window's end), not 1; bob, drained too, then raised to 10 an
// hour for 5 s and spent, is told 30, not the 3570 s until the end of the
// hour's window of the raise. Both are refused when their override ends
// and 1µs before the wait, and admitted at it.
func TestRetryAfterUnderOverrides(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &clock{}
	c.ns.Store(t0.UnixNano())
	st, err := memorystore.New(memorystore.WithClock(c.now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rs := []*rules.Rule{{ID: "orders-per-user", Dimension: "user", Endpoints: []string{"/api/v1/orders"}, Limit: core.PerMinute(5).WithAlgorithm(core.FixedWindow)}}
	first, err := rules.New("1", rs, nil)
	require.NoError(t, err)
	src := &swapSource{first: first, next: make(chan *rules.Snapshot)}
	applied := make(appliedRevisions, 4)
	e, err := engine.New(ctx, st, src, engine.WithClock(c.now), engine.WithObserver(applied))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	mux := http.NewServeMux()
	mux.Handle(httpapi.Path, httpapi.New(e))
	srv := httptest.NewServer(openapitest.New(t).Handler(t, mux))
	t.Cleanup(srv.Close)
	check := func(user string) reply {
		t.Helper()
		return get(t, srv.URL+httpapi.Path+"?mode=status&key_type=user&key_value="+user+"&endpoint=/api/v1/orders")
	}

	for _, user := range []string{"alice", "bob"} {
		for range 5 {
			require.Equal(t, http.StatusOK, check(user).status)
		}
	}
	block := rules.Override{RuleID: "orders-per-user", Dimension: "user", Identifier: "alice", Until: c.now().Add(time.Second)}
	raise := rules.Override{RuleID: "orders-per-user", Dimension: "user", Identifier: "bob", Limit: core.PerHour(10).WithAlgorithm(core.FixedWindow), Until: c.now().Add(5 * time.Second)}
	second, err := rules.New("2", rs, nil, block, raise)
	require.NoError(t, err)
	require.Equal(t, "1", <-applied)
	src.next <- second
	select {
	case rev := <-applied:
		require.Equal(t, "2", rev)
	case <-ctx.Done():
		t.Fatal("the overrides were not applied")
	}
	for range 10 {
		require.Equal(t, http.StatusOK, check("bob").status, "under the raise")
	}
	for _, user := range []string{"alice", "bob"} {
		r := check(user)
		require.Equal(t, http.StatusTooManyRequests, r.status, user)
		require.Equal(t, "30", r.header.Get("Retry-After"), user)
		require.Equal(t, float64(30), r.body["retry_after"], user)
		require.Equal(t, "2027-01-15T08:01:00Z", r.body["reset_at"], user)
		require.Regexp(t, `;t=30$`, r.header.Get("RateLimit"), user)
	}

	c.advance(time.Second) // alice's block ends: her own window decides
	r := check("alice")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "29", r.header.Get("Retry-After"))
	c.advance(4 * time.Second) // bob's raise ends
	r = check("bob")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "25", r.header.Get("Retry-After"))
	c.advance(25*time.Second - time.Microsecond)
	for _, user := range []string{"alice", "bob"} {
		require.Equal(t, http.StatusTooManyRequests, check(user).status, "%s 1µs before the wait", user)
	}
	c.advance(time.Microsecond)
	for _, user := range []string{"alice", "bob"} {
		require.Equal(t, http.StatusOK, check(user).status, "%s at the wait", user)
	}
}
