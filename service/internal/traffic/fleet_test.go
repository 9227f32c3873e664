package traffic_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/traffic"
)

// TestFleetSums: three instances' recorders on one Redis, each counting
// some checks: Read sums what each published, for the fleet and each
// rule, and names them; a publish repeated counts nothing twice; Run
// publishes once more when it ends.
func TestFleetSums(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	now := time.Now()
	recs := make([]*traffic.Recorder, 3)
	fleets := make([]*traffic.Fleet, 3)
	for i := range recs {
		recs[i] = traffic.NewRecorder()
		fleets[i] = traffic.NewFleet(client, "t", string(rune('a'+i)), recs[i], nil)
		for range i + 1 { // a: 1 decision, b: 2, c: 3
			recs[i].Decided(ctx, benchEvent())
		}
		recs[i].Tick(now)
	}
	seen := now.Add(time.Second) // the sampled second is whole
	for _, f := range fleets[:2] {
		require.NoError(t, f.Publish(ctx, seen))
		require.NoError(t, f.Publish(ctx, seen), "again: absolute counts")
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fleets[2].Run(runCtx, time.Hour, time.Second) }()
	cancel()
	<-done // c's last publish

	v, err := fleets[0].Read(ctx, seen)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, v.Instances)
	// Each decision: orders-per-user allowed, api-per-user warned; the
	// instance counts it warned.
	require.Equal(t, traffic.Counts{traffic.Warned: 6}, v.Hour)
	require.Equal(t, traffic.Counts{traffic.Allowed: 6}, v.RuleHours["orders-per-user"])
	require.Equal(t, traffic.Counts{traffic.Warned: 6}, v.RuleHours["api-per-user"])
	var sum traffic.Counts
	for _, c := range v.Minutes {
		sum.Add(c)
	}
	require.Equal(t, v.Hour, sum, "the minutes add up to the hour")

	// Another prefix is another fleet.
	other, err := traffic.NewFleet(client, "u", "z", traffic.NewRecorder(), nil).Read(ctx, seen)
	require.NoError(t, err)
	require.Empty(t, other.Instances)
	require.Zero(t, other.Hour.Total())
}
