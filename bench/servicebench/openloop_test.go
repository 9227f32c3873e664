package servicebench_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/servicebench"
)

// deciderFunc is a decider that runs a function: the open loop's schedule
// is tested against calls of a known duration.
type deciderFunc func(ctx context.Context, key string) (bool, error)

func (f deciderFunc) Decide(ctx context.Context, key string) (bool, error) { return f(ctx, key) }

// TestLoadOpenKeepsTheSchedule: calls that take 1 ms, 400 offered per
// second for 250 ms by 64 callers: the 100 calls of the schedule are made,
// about 1 in flight, none waiting for a caller, and the latency is the
// call's. In a bubble of testing/synctest: the schedule, the calls' 1 ms
// and the test share its clock, so a loaded machine cannot make the calls
// late.
func TestLoadOpenKeepsTheSchedule(t *testing.T) { synctest.Test(t, testLoadOpenKeepsTheSchedule) }

func testLoadOpenKeepsTheSchedule(t *testing.T) {
	var calls atomic.Int64
	d := deciderFunc(func(ctx context.Context, key string) (bool, error) {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return true, nil
	})
	t0 := time.Now()
	r := servicebench.LoadOpen(context.Background(), d, servicebench.OpenConfig{Callers: 64, Keys: servicebench.Users(10), Rate: 400, Duration: 250 * time.Millisecond})
	took := time.Since(t0)
	require.EqualValues(t, 100, r.Calls)
	require.EqualValues(t, 100, calls.Load())
	require.Zero(t, r.Errors)
	require.GreaterOrEqual(t, took, 245*time.Millisecond, "calls are made when due, not as fast as possible")
	require.Less(t, r.MaxInFlight, int64(64), "never short of callers")
	require.GreaterOrEqual(t, r.Latency.Quantile(0.5), time.Millisecond)
	require.EqualValues(t, 100, r.Latency.Count())
	require.EqualValues(t, 100, r.Sent.Count())
}

// TestLoadOpenCountsTheWait: calls that take 20 ms, 1000 offered per
// second by 4 callers: the callers run out, and each call's latency counts
// the time it waited for one (from when it was due), which the latency from
// the send does not. In a bubble of testing/synctest, as above.
func TestLoadOpenCountsTheWait(t *testing.T) { synctest.Test(t, testLoadOpenCountsTheWait) }

func testLoadOpenCountsTheWait(t *testing.T) {
	d := deciderFunc(func(ctx context.Context, key string) (bool, error) {
		time.Sleep(20 * time.Millisecond)
		return true, nil
	})
	r := servicebench.LoadOpen(context.Background(), d, servicebench.OpenConfig{Callers: 4, Keys: []string{"a"}, Rate: 1000, Duration: 40 * time.Millisecond})
	require.EqualValues(t, 40, r.Calls)
	require.EqualValues(t, 4, r.MaxInFlight)
	// Call 39 is due at 39 ms and is sent after 9 rounds of 4 calls, at
	// 180 ms or later: it waited 141 ms or more.
	require.Greater(t, r.Lag.Max(), 140*time.Millisecond)
	require.Greater(t, r.Latency.Max(), 160*time.Millisecond, "the wait and the call")
	require.EqualValues(t, 40, r.Sent.Count())
}

func TestLoadOpenErrorsAndDenials(t *testing.T) {
	boom := errors.New("boom")
	var n atomic.Int64
	d := deciderFunc(func(ctx context.Context, key string) (bool, error) {
		switch n.Add(1) % 3 {
		case 0:
			return false, boom
		case 1:
			return false, nil
		}
		return true, nil
	})
	r := servicebench.LoadOpen(context.Background(), d, servicebench.OpenConfig{Callers: 2, Keys: []string{"a"}, Rate: 3000, Duration: 10 * time.Millisecond})
	require.EqualValues(t, 30, r.Calls)
	require.EqualValues(t, 10, r.Errors)
	require.EqualValues(t, 10, r.Denied)
	require.ErrorIs(t, r.FirstErr, boom)
}
