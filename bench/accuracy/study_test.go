package accuracy

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

var quickLimit = core.Limit{Rate: 100, Period: time.Minute}

// tiny keeps the tests fast under -race; Quick is used by cmd/accuracy.
var tiny = Scale{Name: "tiny", Clients: 4, Periods: 8, ManyClients: 200, ManyPeriods: 4}

func quickTraces(t *testing.T) []Trace {
	t.Helper()
	traces, err := Traces(quickLimit, tiny, 7)
	if err != nil {
		t.Fatal(err)
	}
	return traces
}

func replay(t *testing.T, tr *Trace, name string) Metrics {
	t.Helper()
	m, err := Replay(context.Background(), tr, quickLimit, decider(t, quickLimit, name, tr.Clients))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTraces(t *testing.T) {
	traces := quickTraces(t)
	again := quickTraces(t)
	if !reflect.DeepEqual(traces, again) {
		t.Fatal("the same seed gave different traces")
	}
	other, err := Traces(quickLimit, tiny, 8)
	if err != nil {
		t.Fatal(err)
	}
	P := int64(quickLimit.Period / time.Microsecond)
	for i, tr := range traces {
		t.Run(tr.Name, func(t *testing.T) {
			if len(tr.Requests) == 0 {
				t.Fatal("no requests")
			}
			if reflect.DeepEqual(tr.Requests, other[i].Requests) {
				t.Fatal("another seed gave the same trace")
			}
			if tr.Start%P != 0 {
				t.Fatalf("Start %d is not aligned on the Period", tr.Start)
			}
			for j, r := range tr.Requests {
				if r.At < tr.Start || r.At >= tr.End || r.Client < 0 || int(r.Client) >= tr.Clients ||
					(j > 0 && r.At < tr.Requests[j-1].At) {
					t.Fatalf("request %d %+v out of order or range", j, r)
				}
			}
		})
	}

	// Shapes: the steady traces average their multiple of the limit; the
	// boundary attacker fires only within 1% of a Period of a boundary.
	rates := map[string]float64{"steady-0.5x": 0.5, "steady-1x": 1, "steady-2x": 2}
	for _, tr := range traces {
		periods := float64(tr.End-tr.Start) / float64(P)
		got := float64(len(tr.Requests)) / periods / float64(tr.Clients) / float64(quickLimit.Rate)
		if want, ok := rates[tr.Name]; ok && math.Abs(got-want) > 0.05*want {
			t.Errorf("%s: %.3f× the limit, want %.1f×", tr.Name, got, want)
		}
		if tr.Name == "boundary" {
			for _, r := range tr.Requests {
				if off := (r.At - tr.Start) % P; off >= P/100 && off < P-P/100 {
					t.Fatalf("boundary request %d µs into its window", off)
				}
			}
		}
	}
}

// TestExactAlgorithms: the reference and sluice's sliding log make the same
// decisions on every trace, so the log has no error against itself and
// never admits more than Rate in a window.
func TestExactAlgorithms(t *testing.T) {
	for _, tr := range quickTraces(t) {
		t.Run(tr.Name, func(t *testing.T) {
			exact, log := replay(t, &tr, Exact), replay(t, &tr, "sliding_window_log")
			if exact != log {
				t.Fatalf("exact %+v\nlog   %+v", exact, log)
			}
			if exact.WronglyAllowed+exact.WronglyDenied != 0 || exact.MaxWindow > quickLimit.Rate {
				t.Fatalf("the reference disagrees with itself: %+v", exact)
			}
		})
	}
}

// TestBucketsAndFixedWindow: token bucket, leaky bucket and GCRA are one
// meter (identical figures), and neither they nor the fixed window ever
// deny a request the exact log would admit: a bucket of capacity Rate
// refilled at Rate per Period, and an aligned window inside the sliding
// one, only ever count fewer.
func TestBucketsAndFixedWindow(t *testing.T) {
	for _, tr := range quickTraces(t) {
		t.Run(tr.Name, func(t *testing.T) {
			tb := replay(t, &tr, "token_bucket")
			for _, a := range []string{"leaky_bucket", "gcra"} {
				if m := replay(t, &tr, a); m != tb {
					t.Fatalf("%s %+v\ntoken_bucket %+v", a, m, tb)
				}
			}
			if fw := replay(t, &tr, "fixed_window"); tb.WronglyDenied != 0 || fw.WronglyDenied != 0 {
				t.Fatalf("wrongly denied: token_bucket %d, fixed_window %d", tb.WronglyDenied, fw.WronglyDenied)
			}
		})
	}
}

// TestCounterFollowsFormula checks every decision of sluice's sliding window
// counter against its documented rule, computed from its own admissions:
// admit when p×(P-e) + (c+1)×P <= Rate×P.
func TestCounterFollowsFormula(t *testing.T) {
	P := int64(quickLimit.Period / time.Microsecond)
	for _, tr := range quickTraces(t) {
		t.Run(tr.Name, func(t *testing.T) {
			d := decider(t, quickLimit, "sliding_window_counter", tr.Clients)
			hs := make([]history, tr.Clients)
			check := func(ctx context.Context, c int32, at int64) (bool, error) {
				w := at / P
				p, cur := hs[c].counts(w)
				want := p*(P-(at-w*P))+(cur+1)*P <= quickLimit.Rate*P
				ok, err := d(ctx, c, at)
				if err == nil && ok != want {
					t.Fatalf("client %d at +%d µs (p=%d c=%d): admitted %v, the formula says %v", c, at-tr.Start, p, cur, ok, want)
				}
				if ok {
					hs[c].admit(at, w)
				}
				return ok, err
			}
			if _, err := Replay(context.Background(), &tr, quickLimit, check); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	rep, err := Run(ctx, WithScale(tiny), WithSeed(3), WithParallel(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(rep.Traces)*len(Algorithms) || len(rep.Traces) != 7 {
		t.Fatalf("%d traces, %d rows", len(rep.Traces), len(rep.Rows))
	}
	serial, err := Run(ctx, WithScale(tiny), WithSeed(3), WithParallel(1))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, serial) {
		t.Fatal("the results depend on WithParallel")
	}

	// The attack each algorithm is known for.
	want := []struct {
		trace, algorithm string
		ratio            float64
	}{
		{"boundary", "fixed_window", 2},
		{"boundary", Exact, 1},
		{"boundary", "sliding_window_counter", 1},
		{"burst-flood", "sliding_window_log", 1},
	}
	for _, w := range want {
		row, ok := rep.Row(w.trace, w.algorithm)
		if !ok {
			t.Fatalf("no row %s/%s", w.trace, w.algorithm)
		}
		if got := row.MaxRatio(rep.Limit.Rate); got != w.ratio {
			t.Errorf("%s/%s: max window ratio %v, want %v", w.trace, w.algorithm, got, w.ratio)
		}
	}
	for _, a := range []string{"sliding_window_counter", "fixed_window", "token_bucket"} {
		if row, _ := rep.Row("burst-flood", a); row.MaxRatio(rep.Limit.Rate) < 1.8 {
			t.Errorf("burst-flood/%s: max window ratio %v, want nearly 2", a, row.MaxRatio(rep.Limit.Rate))
		}
	}
	for _, tr := range rep.Traces {
		if tr.CountAll.Requests != int64(tr.Requests) {
			t.Errorf("%s: CountAll saw %d of %d requests", tr.Name, tr.CountAll.Requests, tr.Requests)
		}
	}
	if tr := rep.Traces[2]; tr.Name != "steady-2x" || tr.CountAll.Disagreements != 0 {
		t.Errorf("%s: a client steadily at twice the limit is over it by any count, got %d disagreements", tr.Name, tr.CountAll.Disagreements)
	}

	md := rep.Markdown()
	for _, tr := range rep.Traces {
		for _, a := range Algorithms {
			if !strings.Contains(md, "| `"+tr.Name+"` | "+algorithmLabel(a)+" |") {
				t.Fatalf("the Markdown has no row for %s/%s", tr.Name, a)
			}
		}
	}

	// The SVG is well-formed XML with one bar group per row in each panel.
	svg := rep.SVG()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	groups := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "g" {
			groups++
		}
	}
	if groups != 2*len(rep.Rows) {
		t.Fatalf("SVG has %d bar groups, want %d", groups, 2*len(rep.Rows))
	}
}

func TestRunErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		opts []Option
	}{
		{"log rate above MaxLogRate", context.Background(), []Option{WithLimit(core.MaxLogRate+1, time.Minute)}},
		{"zero rate", context.Background(), []Option{WithLimit(0, time.Minute)}},
		{"bad scale", context.Background(), []Option{WithScale(Scale{Name: "empty"})}},
		{"no workers", context.Background(), []Option{WithParallel(0)}},
		{"canceled", ctx, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(tt.ctx, tt.opts...); err == nil {
				t.Fatal("Run succeeded")
			}
		})
	}
	if _, err := ParseScale("huge"); err == nil {
		t.Fatal("ParseScale accepted huge")
	}
	for _, s := range []Scale{Quick, Full} {
		if got, err := ParseScale(s.Name); err != nil || got != s {
			t.Fatalf("ParseScale(%q) = %+v, %v", s.Name, got, err)
		}
	}
}

// TestNoEviction: the stores of the full scale's many-clients trace keep
// every key (an evicted key would restart fresh).
func TestNoEviction(t *testing.T) {
	d, st, err := NewSluice(quickLimit.WithAlgorithm(core.SlidingWindowLog), Full.ManyClients)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for c := range int32(Full.ManyClients) {
		if _, err := d(context.Background(), c, t0); err != nil {
			t.Fatal(err)
		}
	}
	if st.Len() != Full.ManyClients || st.Evictions() != 0 {
		t.Fatalf("%d keys, %d evictions", st.Len(), st.Evictions())
	}
}

func TestReplaceGenerated(t *testing.T) {
	doc := "intro\n" + BeginMarker + "\nold\n" + EndMarker + "\noutro\n"
	got, err := ReplaceGenerated(doc, "new")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + BeginMarker + "\nnew\n" + EndMarker + "\noutro\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"no markers", BeginMarker + "\nunterminated", EndMarker + "\n" + BeginMarker + "\n"} {
		if _, err := ReplaceGenerated(bad, "new"); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
}

func TestPercent(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0"},
		{0.00003, "0.0030%"},
		{0.005, "0.500%"},
		{0.4912, "49.12%"},
		{math.NaN(), "n/a"},
	}
	for _, tt := range tests {
		if got := percent(tt.f); got != tt.want {
			t.Errorf("percent(%v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}
