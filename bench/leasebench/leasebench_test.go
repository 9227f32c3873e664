package leasebench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/accuracy"
	"github.com/sluicehq/sluice/bench/leasebench"
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
)

func TestMain(m *testing.M) {
	leasebench.MaybeChild()
	os.Exit(m.Run())
}

// Every scenario, small: what the report prints comes from these runs.
func TestScenarios(t *testing.T) {
	ctx := context.Background()
	srv := redisbench.StartServerTB(t)
	cfg := leasebench.HotKeyConfig{Procs: 2, Goroutines: 4, Duration: 300 * time.Millisecond, Hold: 50 * time.Millisecond}
	for _, mode := range []string{"exact", "leased"} {
		r, err := leasebench.RunHotKey(ctx, srv, mode, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("hot key %s: %.0f decisions/s, %.4f Redis calls and %s of Redis CPU per decision", mode, r.PerSecond(), r.CallsPerDecision(), r.CPUPerDecision())
		if mode == "leased" && r.CallsPerDecision() > 0.05 {
			t.Errorf("leased: %.4f Redis calls per decision", r.CallsPerDecision())
		}
	}
	lat, err := leasebench.RunLatency(ctx, srv, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("latency: memory %s, leased %s (%.2f×), %d Redis calls", lat.Memory, lat.Leased, lat.Ratio(), lat.LeasedCalls)
	g, err := leasebench.RunGlobal(ctx, srv, leasebench.GlobalConfig{Instances: 8, Goroutines: 1, Rate: 50_000, Duration: 2500 * time.Millisecond, Hold: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("global: offered %.0f/s, per window %v, worst %.2f%%, Redis share %.5f", g.Offered(), g.PerWindow, 100*g.WorstDeviation(), g.RedisShare())
	for _, a := range []core.Algorithm{core.FixedWindow, core.TokenBucket} {
		scale := accuracy.Quick
		scale.ManyClients, scale.ManyPeriods = 200, 5
		p, err := leasebench.RunPareto(ctx, a, leasebench.ParetoConfig{Limit: core.Per(100, time.Second), Scale: scale, Instances: 4, Hold: 100 * time.Millisecond, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pareto %s: %d requests, exact %d, leased %d (%.2f%% fewer), %.3f store calls per decision", a, p.Requests, p.Exact, p.Leased, 100*p.UnderAdmission(), p.CallsPerDecision())
		if p.Over != 0 {
			t.Errorf("pareto %s: %d admissions over the limit", a, p.Over)
		}
	}
	bin, err := redisbench.FindBinary(redisbench.ServerEnv, "redis-server")
	if err != nil {
		t.Fatal(err)
	}
	o, err := leasebench.RunOutage(ctx, bin, 4, 200*time.Millisecond, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outage: %d decided from blocks over %s after the kill, then %d failed closed", o.Held, o.HeldFor, o.FailedClosed)
	if o.Held == 0 {
		t.Error("no decision went on from the blocks held")
	}
}
