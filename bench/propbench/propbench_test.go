package propbench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/propbench"
	"github.com/sluicehq/sluice/bench/servicebench"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// ratelimitd builds ratelimitd from the service module of this tree.
func ratelimitd(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := servicebench.BuildRatelimitd(ctx, servicebench.GoCommand(), "../../service", t.TempDir(), os.Stderr)
	require.NoError(t, err)
	return bin
}

// Two instances on one PostgreSQL: every change written (on the database,
// then through A's admin API) reaches B's decisions within a second.
func TestPropagation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := propbench.StartCluster(ctx, ratelimitd(t))
	if err == propbench.ErrNoPostgres && os.Getenv("SLUICE_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	require.NoError(t, err)
	defer c.Close()
	require.NotEqual(t, c.A.GRPCAddr, c.B.GRPCAddr)
	for _, via := range []propbench.Via{propbench.ViaDB, ""} {
		r, err := c.Run(ctx, propbench.Config{Changes: 10, Pause: 5 * time.Millisecond, Timeout: 2 * time.Second, Via: via})
		require.NoError(t, err)
		require.Len(t, r.Delays, 10)
		require.Len(t, r.Writes, 10)
		require.Less(t, propbench.Quantile(r.Delays, 1), time.Second, "%s: %v", r.Via, r.Delays)
		if via == "" {
			require.Equal(t, propbench.ViaAPI, r.Via, "ratelimitd serve --db serves the admin API: the changes go through PUT on A")
		}
		t.Logf("%s: delays %v", r.Via, r.Delays)
	}
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	require.Equal(t, time.Duration(3), propbench.Quantile(ds, 0.5))
	require.Equal(t, time.Duration(5), propbench.Quantile(ds, 1))
	require.Equal(t, time.Duration(1), propbench.Quantile(ds, 0))
	require.Zero(t, propbench.Quantile(nil, 0.5))
}

// StartPostgres returns only a server it started itself (its postmaster
// ready on the port of the DSN), which carries rulesdb's schema.
func TestStartPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := propbench.StartPostgres(ctx)
	if err == propbench.ErrNoPostgres && os.Getenv("SLUICE_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	require.NoError(t, err)
	d, err := rulesdb.Open(ctx, p.DSN())
	require.NoError(t, err)
	rev, err := d.Revision(ctx)
	require.NoError(t, err)
	require.Zero(t, rev)
	require.NoError(t, d.Close())
	p.Close()
	_, err = rulesdb.Open(ctx, p.DSN())
	require.Error(t, err, "stopped with Close")
}
