package redisbench_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/membench"
	"github.com/sluicehq/sluice/bench/redisbench"
)

func TestHistogramQuantiles(t *testing.T) {
	var h redisbench.Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(rand.Int64N(int64(20 * time.Millisecond)))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if got < want || float64(got) > float64(want)*(1+1.0/64)+1 {
			t.Errorf("Quantile(%v) = %v, want %v within +1/64", q, got, want)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Max() != vals[len(vals)-1] {
		t.Errorf("Count %d, Max %v; want %d, %v", h.Count(), h.Max(), len(vals), vals[len(vals)-1])
	}
	var small redisbench.Histogram
	for v := range 300 {
		small.Record(time.Duration(v))
	}
	if got := small.Quantile(0.5); got < 149 || got > 152 {
		t.Errorf("small Quantile(0.5) = %v, want about 150ns", got)
	}
}

// TestImpls runs every implementation briefly on a real server: the
// harness, the adapters and the limits (nothing denied) work.
func TestImpls(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	ctx := context.Background()
	keys := membench.Keys(redisbench.Identities)
	for _, impl := range redisbench.Impls() {
		t.Run(impl.Name, func(t *testing.T) {
			var s redisbench.Sample
			var err error
			if impl.Kind == redisbench.Ceiling {
				bin, ferr := redisbench.FindBinary(redisbench.BenchmarkEnv, "redis-benchmark")
				if ferr != nil {
					t.Skipf("skipping redis ceiling: %v", ferr)
				}
				s, err = redisbench.RunCeiling(ctx, srv.Admin(), srv.Port, bin, impl, 8, redisbench.Identities, 2000, time.Minute)
			} else {
				s, err = redisbench.Run(ctx, srv.Admin(), srv.Addr, impl, redisbench.RunConfig{Callers: 8, Keys: keys, N: 400})
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.PerSec <= 0 || s.ScriptCalls == 0 || s.RoundTrips == 0 {
				t.Errorf("implausible sample %+v", s)
			}
			if impl.Kind != redisbench.Ceiling && (s.Decisions != 400 || s.P50 <= 0 || s.P99 < s.P50) {
				t.Errorf("%d decisions (want 400), p50 %v, p99 %v", s.Decisions, s.P50, s.P99)
			}
		})
	}
}

// TestMemory runs the memory scenario briefly for every implementation: each
// identity leaves at least one Redis key and a plausible number of bytes.
func TestMemory(t *testing.T) {
	srv := redisbench.StartServerTB(t)
	ctx := context.Background()
	keys := membench.Keys(2000)
	for _, impl := range redisbench.Impls() {
		if impl.Kind == redisbench.Ceiling {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			s, err := redisbench.RunMemory(ctx, srv.Admin(), srv.Addr, impl, 8, keys)
			if err != nil {
				t.Fatal(err)
			}
			if s.Identities != len(keys) || s.KeysPerIdentity() < 1 || s.KeysPerIdentity() > 3 {
				t.Errorf("%d identities, %.2f Redis keys per identity", s.Identities, s.KeysPerIdentity())
			}
			if b := s.BytesPerIdentity(); b < 16 || b > 4096 {
				t.Errorf("%.1f bytes per identity (used_memory %d -> %d)", b, s.Before, s.After)
			}
		})
	}
}
