package servicebench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/bench/servicebench"
)

// A churn run rewrites ratelimitd's rules file during the measured load,
// ratelimitd applies the changes (counted from its metrics), and the
// original rules are back in force afterwards.
func TestRunChurn(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	servers := &servicebench.Servers{Redis: srv, GoCommand: servicebench.GoCommand(), ServiceDir: "../../service", Log: testWriter{t}}
	defer servers.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	users := servicebench.Users(50)
	tgt, done, err := servers.Target(ctx, servicebench.ChurnImpl(), 1, 8, users)
	require.NoError(t, err)
	defer done()
	require.NotEmpty(t, tgt.Server.RulesFile)
	ok0, bad0, err := servicebench.Reloads(ctx, tgt.Server.HTTPAddr)
	require.NoError(t, err)
	require.Zero(t, ok0+bad0)

	s, cr, err := servicebench.RunChurn(ctx, tgt, servicebench.RunConfig{Callers: 8, Users: users, Warmup: 50 * time.Millisecond, Duration: 2500 * time.Millisecond}, servicebench.ChurnInterval)
	require.NoError(t, err)
	require.Positive(t, s.Checks)
	// Changes at 1 s and 2 s, each seen by ratelimitd's next poll (every
	// second): the first is applied within the run.
	require.GreaterOrEqual(t, cr.Written, int64(2))
	require.Positive(t, cr.Applied)
	require.Zero(t, cr.Refused)
	data, err := os.ReadFile(tgt.Server.RulesFile)
	require.NoError(t, err)
	require.Equal(t, string(servicebench.RulesYAML()), string(data), "the original rules are restored")

	// A refused change (an invalid file) fails the run.
	require.NoError(t, os.WriteFile(tgt.Server.RulesFile, []byte("domain: [\n"), 0o644))
	require.Eventually(t, func() bool {
		_, bad, err := servicebench.Reloads(ctx, tgt.Server.HTTPAddr)
		return err == nil && bad > 0
	}, 10*time.Second, 100*time.Millisecond, "ratelimitd reports the invalid file")
	require.NoError(t, servicebench.RestoreRules(tgt.Server.RulesFile))
}

func TestRulesYAMLRate(t *testing.T) {
	require.Contains(t, string(servicebench.RulesYAMLRate(servicebench.ChurnRate)), "requests_per_unit: 999999\n")
	require.Contains(t, string(servicebench.RulesYAMLRate(servicebench.ChurnRate)), "requests_per_unit: 5\n")
}

// The DB variant: ratelimitd on a SQLite rules database applies the rule
// changes written to it during the load, and the rule is back at Rate after.
func TestRunChurnDB(t *testing.T) {
	servers := &servicebench.Servers{GoCommand: servicebench.GoCommand(), ServiceDir: "../../service", Log: testWriter{t}}
	defer servers.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := servers.Binary(ctx, servicebench.Ratelimitd)
	require.NoError(t, err)
	users := servicebench.Users(50)
	d, err := servicebench.StartDBTarget(ctx, bin, 1, 8, users)
	require.NoError(t, err)
	defer d.Close()
	s, cr, err := servicebench.RunChurnWith(ctx, d.Target, servicebench.RunConfig{Callers: 8, Users: users, Warmup: 50 * time.Millisecond, Duration: 2500 * time.Millisecond}, servicebench.ChurnInterval, d.Changer)
	require.NoError(t, err)
	require.Positive(t, s.Checks)
	require.GreaterOrEqual(t, cr.Written, int64(2))
	require.Positive(t, cr.Applied)
	require.Zero(t, cr.Refused)
	// The same process keeps deciding after the churn.
	s, err = servicebench.Run(ctx, d.Target, servicebench.RunConfig{Callers: 8, Users: users, N: 200})
	require.NoError(t, err)
	require.EqualValues(t, 200, s.Checks)
}
