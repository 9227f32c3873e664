package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// The one-op paths allocate no more than TakeSplit did before the one Store
// contract, on the memory store: a request of one policy nothing (its op
// lives in the Decision), a key-level AllowN only its context detached from
// the caller's cancellation (its op and result are pooled).
func TestOneOpPathsAllocateNothing(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(core.MaxRate)}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // a context to detach from
	defer cancel()
	var r keyfunc.Request = keyfunc.Static{Headers: map[string][]string{"U": {"alice"}}}
	var d core.Decision
	require.NoError(t, l.Decide(ctx, r, core.Call{}, &d))
	require.Zero(t, testing.AllocsPerRun(200, func() {
		if err := l.Decide(ctx, r, core.Call{}, &d); err != nil {
			t.Fatal(err)
		}
	}), "Decide")
	require.True(t, d.Allowed)
	require.LessOrEqual(t, testing.AllocsPerRun(200, func() {
		if _, err := l.AllowN(ctx, "p", "bob", 1); err != nil {
			t.Fatal(err)
		}
	}), 1.0, "AllowN")
}
