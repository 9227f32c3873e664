package accuracy

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// t0 is a whole second (2026-01-01T00:00:00Z), so a multiple of every
// Period used here: windows start at t0.
const t0 = int64(1_767_225_600_000_000)

// boundaryTrace is one client sending n requests evenly in the last 10 ms
// before t0+1s and n more in the first 10 ms after it.
func boundaryTrace(n int) *Trace {
	tr := &Trace{Name: "hand-made", Clients: 1, Start: t0, End: t0 + 2_000_000}
	for i := range n {
		tr.Requests = append(tr.Requests, Request{At: t0 + 990_000 + int64(i)*1000})
	}
	for i := range n {
		tr.Requests = append(tr.Requests, Request{At: t0 + 1_000_000 + int64(i)*1000})
	}
	return tr
}

func always(ok bool) Decider {
	return func(context.Context, int32, int64) (bool, error) { return ok, nil }
}

// decider returns the decider of name (Exact or an algorithm) for tr.
func decider(t *testing.T, l core.Limit, name string, clients int) Decider {
	t.Helper()
	if name == Exact {
		return NewExact(l, clients)
	}
	a, err := core.ParseAlgorithm(name)
	if err != nil {
		t.Fatal(err)
	}
	d, st, err := NewSluice(l.WithAlgorithm(a), clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return d
}

func TestReplayHandMade(t *testing.T) {
	l := core.Limit{Rate: 10, Period: time.Second}
	tests := []struct {
		name string
		d    func(t *testing.T) Decider
		want Metrics
	}{
		{
			name: "exact",
			d:    func(t *testing.T) Decider { return decider(t, l, Exact, 1) },
			want: Metrics{Requests: 20, Admitted: 10, MaxWindow: 10},
		},
		{
			name: "sliding log",
			d:    func(t *testing.T) Decider { return decider(t, l, "sliding_window_log", 1) },
			want: Metrics{Requests: 20, Admitted: 10, MaxWindow: 10},
		},
		{
			// Both bursts land in different aligned windows: all 20 pass,
			// twice the limit within 20 ms. The 11th makes 11 (10% over,
			// not more), the 12th to 20th are more than 10% over.
			name: "fixed window admits twice the limit",
			d:    func(t *testing.T) Decider { return decider(t, l, "fixed_window", 1) },
			want: Metrics{Requests: 20, Admitted: 20, MaxWindow: 20, WronglyAllowed: 10, FarAllowed: 9},
		},
		{
			// The previous window's 10 weigh 10×(1-e/1s) > 9 within the
			// first 10 ms: nothing more passes.
			name: "sliding counter",
			d:    func(t *testing.T) Decider { return decider(t, l, "sliding_window_counter", 1) },
			want: Metrics{Requests: 20, Admitted: 10, MaxWindow: 10},
		},
		{
			// A fresh bucket holds 10; 20 ms refill 0.2 of a token.
			name: "token bucket",
			d:    func(t *testing.T) Decider { return decider(t, l, "token_bucket", 1) },
			want: Metrics{Requests: 20, Admitted: 10, MaxWindow: 10},
		},
		{
			name: "allow everything",
			d:    func(*testing.T) Decider { return always(true) },
			want: Metrics{Requests: 20, Admitted: 20, MaxWindow: 20, WronglyAllowed: 10, FarAllowed: 9},
		},
		{
			// The window of every request is empty: every denial is wrong
			// and far from full.
			name: "deny everything",
			d:    func(*testing.T) Decider { return always(false) },
			want: Metrics{Requests: 20, WronglyDenied: 20, FarDenied: 20},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Replay(context.Background(), boundaryTrace(10), l, tt.d(t))
			if err != nil {
				t.Fatal(err)
			}
			got.EstimateSamples, got.EstimateErrorSum = 0, 0 // tested separately
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	m, err := Replay(context.Background(), boundaryTrace(10), l, always(true))
	if err != nil {
		t.Fatal(err)
	}
	if r := m.MaxRatio(l.Rate); r != 2 {
		t.Fatalf("MaxRatio = %v, want 2", r)
	}
	if s := m.WronglyAllowedShare(); s != 0.5 {
		t.Fatalf("WronglyAllowedShare = %v, want 0.5", s)
	}
}

func TestReplayRejectsBadInput(t *testing.T) {
	l := core.Limit{Rate: 10, Period: time.Second}
	tests := []struct {
		name string
		tr   *Trace
		l    core.Limit
	}{
		{"out of order", &Trace{Clients: 1, Requests: []Request{{At: t0 + 5}, {At: t0}}}, l},
		{"client out of range", &Trace{Clients: 1, Requests: []Request{{At: t0, Client: 1}}}, l},
		{"zero rate", &Trace{Clients: 1}, core.Limit{Period: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Replay(context.Background(), tt.tr, tt.l, always(true)); err == nil {
				t.Fatal("Replay accepted it")
			}
		})
	}
}

func TestCounterEstimate(t *testing.T) {
	tests := []struct {
		prev, cur, elapsed, P int64
		want                  float64
	}{
		{42, 18, 15, 60, 49.5}, // Cloudflare's example: 42×45/60 + 18
		{10, 0, 0, 1000, 10},
		{10, 3, 1000, 1000, 3},
		{0, 7, 500, 1000, 7},
	}
	for _, tt := range tests {
		if got := counterEstimate(tt.prev, tt.cur, tt.elapsed, tt.P); got != tt.want {
			t.Errorf("counterEstimate(%d, %d, %d, %d) = %v, want %v", tt.prev, tt.cur, tt.elapsed, tt.P, got, tt.want)
		}
	}
}

// TestMeasureCountAll: one client sending a request every 50 ms (twice the
// limit of 10/s) for 5 s. In the first window the estimate is exact; after
// it the estimate is 20 (20×(1-e) + 20e) while the true count of the open
// window (t-1s, t) is 19: an error of 1/19, and both always agree the
// client is over the limit.
func TestMeasureCountAll(t *testing.T) {
	l := core.Limit{Rate: 10, Period: time.Second}
	tr := &Trace{Name: "even", Clients: 1, Start: t0, End: t0 + 5_000_000}
	for at := t0; at < tr.End; at += 50_000 {
		tr.Requests = append(tr.Requests, Request{At: at})
	}
	m, err := MeasureCountAll(context.Background(), tr, l)
	if err != nil {
		t.Fatal(err)
	}
	if m.Requests != 100 || m.Disagreements != 0 || m.Samples != 99 {
		t.Fatalf("got %+v, want 100 requests, 99 samples, no disagreement", m)
	}
	if want := 80.0 / 19; math.Abs(m.ErrorSum-want) > 1e-9 {
		t.Fatalf("ErrorSum = %v, want %v", m.ErrorSum, want)
	}

	// The estimate's error in Replay is the same measure on the admitted
	// history: with everything admitted, the two coincide.
	r, err := Replay(context.Background(), tr, l, always(true))
	if err != nil {
		t.Fatal(err)
	}
	if r.EstimateSamples != m.Samples || math.Abs(r.EstimateErrorSum-m.ErrorSum) > 1e-9 {
		t.Fatalf("Replay estimate %d/%v, MeasureCountAll %d/%v", r.EstimateSamples, r.EstimateErrorSum, m.Samples, m.ErrorSum)
	}
}
