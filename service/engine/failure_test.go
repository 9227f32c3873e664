package engine_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// TestStoreFailure kills Redis under an engine: without a guard every call
// is an error wrapping the store's (never a panic), and under a guard the
// failure mode answers, the Decision's Source saying so.
func TestStoreFailure(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	const yaml = `
rules:
  - name: r
    dimension: user
    rate: 5
    period: 1m
`
	plain := redisStore(t, srv.Addr, redisstore.WithTimeout(200*time.Millisecond))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open, err := guard.New(redisStore(t, srv.Addr, redisstore.WithTimeout(200*time.Millisecond)), guard.WithFailOpen(), guard.WithLogger(quiet))
	require.NoError(t, err)
	closed, err := guard.New(redisStore(t, srv.Addr, redisstore.WithTimeout(200*time.Millisecond)), guard.WithFailClosed(time.Second), guard.WithLogger(quiet))
	require.NoError(t, err)
	ePlain, eOpen, eClosed := newEngine(t, plain, yaml), newEngine(t, open, yaml), newEngine(t, closed, yaml)
	c := engine.Check{Dimension: "user", Identifier: "u", Cost: 1}
	for _, e := range []*engine.Engine{ePlain, eOpen, eClosed} {
		require.True(t, mustCheck(t, e, c).Allowed)
	}
	srv.Kill()

	_, err = ePlain.Check(ctx, c)
	require.Error(t, err)
	require.NotErrorIs(t, err, engine.ErrInvalid)
	_, errs := ePlain.CheckBatch(ctx, []engine.Check{c, c}, true)
	require.Error(t, errs[0])
	require.Error(t, errs[1])

	r := mustCheck(t, eOpen, c)
	require.True(t, r.Allowed)
	require.Equal(t, core.FailedOpen, r.Decision.Results[0].Source)
	r = mustCheck(t, eClosed, c)
	require.False(t, r.Allowed)
	require.Equal(t, core.FailedClosed, r.Decision.Results[0].Source)
	require.Equal(t, core.OutcomeFailedClosed, r.Decision.Outcome(0))

	// Envoy descriptors under a guard too.
	s, err := rules.New("x", []*rules.Rule{{ID: "e", Domain: "d", Limit: core.PerMinute(1), Envoy: &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: "k"}}}}}, nil)
	require.NoError(t, err)
	ed, err := engine.New(ctx, open, newSource(s))
	require.NoError(t, err)
	dr, err := ed.Descriptors(ctx, "d", []engine.Descriptor{{Entries: []rules.Entry{{Key: "k", Value: "v"}}, Cost: 1}})
	require.NoError(t, err)
	require.True(t, dr.Allowed)
	require.Equal(t, core.FailedOpen, dr.Statuses[0].Result.Source)
}
