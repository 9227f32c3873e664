package accuracy

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Request is one request of a trace: the instant it arrives, in µs since the
// Unix epoch (the clock of sluice's step functions, whose windows are aligned
// on the epoch), and the client (key) it counts against.
type Request struct {
	At     int64
	Client int32
}

// Trace is a seeded sequence of requests from several clients, sorted by
// instant. Every client is an independent key of the same limit.
type Trace struct {
	// Name is the short identifier used in tables and the chart.
	Name string
	// Title describes the traffic in one sentence.
	Title string
	// Clients is the number of distinct clients (keys); Client values are
	// in [0, Clients).
	Clients int
	// Start and End bound the instants of the requests (µs since the
	// epoch); Start is aligned on the limit's Period.
	Start, End int64
	// Requests are sorted by At.
	Requests []Request
}

// Scale sizes the traces. Quick keeps a replay of all of them under a
// second; Full is the size the documentation's figures come from.
type Scale struct {
	// Name identifies the scale on the command line.
	Name string
	// Clients is the number of clients of the steady, bursty and attacker
	// traces.
	Clients int
	// Periods is the length of those traces, in Periods of the limit.
	Periods int
	// ManyClients is the number of clients of the many-clients trace.
	ManyClients int
	// ManyPeriods is its length in Periods.
	ManyPeriods int
}

// The two scales of the study.
var (
	Quick = Scale{Name: "quick", Clients: 10, Periods: 20, ManyClients: 500, ManyPeriods: 10}
	Full  = Scale{Name: "full", Clients: 100, Periods: 60, ManyClients: 10_000, ManyPeriods: 20}
)

// ParseScale returns the Scale named name (quick or full).
func ParseScale(name string) (Scale, error) {
	for _, s := range []Scale{Quick, Full} {
		if s.Name == name {
			return s, nil
		}
	}
	return Scale{}, fmt.Errorf("accuracy: unknown scale %q (want quick or full)", name)
}

// Shape constants of the traces, in units of the limit (Rate per Period).
const (
	// burstyOn is the rate of a bursty client while on, as a multiple of
	// the limit; it is on a fifth of the time, so its mean rate is the limit.
	burstyOn = 5.0
	// burstyOnMean and burstyOffMean are the mean lengths of its on and off
	// phases, in Periods (exponentially distributed).
	burstyOnMean, burstyOffMean = 0.1, 0.4
	// edgeFraction is the share of a Period, just before or just after a
	// window boundary, within which an attacker fires a burst.
	edgeFraction = 0.01
	// floodRate is the rate of the flood that follows an edge burst, as a
	// multiple of the limit.
	floodRate = 4.0
	// paretoShape and paretoMedian shape the heavy-tailed rates of the
	// many-clients trace (median a tenth of the limit, a few percent of
	// the clients above it); paretoCap bounds the heaviest client.
	paretoShape, paretoMedian, paretoCap = 1.5, 0.1, 20.0
)

// startInstant is where every trace begins (2026-01-01T00:00:00Z, rounded
// down to a multiple of the Period so that windows start with the trace).
var startInstant = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// Traces returns the study's traces for limit l (its Rate and Period; the
// algorithm is ignored) at scale sc. The same seed gives the same traces;
// each trace has its own random stream, so changing one scale parameter
// does not reshuffle the others.
func Traces(l core.Limit, sc Scale, seed uint64) ([]Trace, error) {
	if l.Rate < 1 || l.Period < time.Microsecond {
		return nil, fmt.Errorf("accuracy: Traces: invalid limit %s", l)
	}
	if sc.Clients < 1 || sc.Periods < 2 || sc.ManyClients < 1 || sc.ManyPeriods < 1 {
		return nil, fmt.Errorf("accuracy: Traces: invalid scale %+v", sc)
	}
	P := int64(l.Period / time.Microsecond)
	start := startInstant / P * P
	kinds := []struct {
		name, title string
		clients     int
		periods     int
		fill        func(g *gen)
	}{
		{"steady-0.5x", "Poisson arrivals at half the limit", sc.Clients, sc.Periods, func(g *gen) { g.steady(0.5) }},
		{"steady-1x", "Poisson arrivals at the limit", sc.Clients, sc.Periods, func(g *gen) { g.steady(1) }},
		{"steady-2x", "Poisson arrivals at twice the limit", sc.Clients, sc.Periods, func(g *gen) { g.steady(2) }},
		{"bursty", fmt.Sprintf("on/off: Poisson at %g× the limit while on (mean %g Period), silent while off (mean %g Period); the mean rate is the limit", burstyOn, burstyOnMean, burstyOffMean), sc.Clients, sc.Periods, (*gen).bursty},
		{"boundary", fmt.Sprintf("attacker: Rate requests in the last %g%% of a window and Rate more in the first %g%% of the next, at every other boundary", 100*edgeFraction, 100*edgeFraction), sc.Clients, sc.Periods, (*gen).boundary},
		{"burst-flood", fmt.Sprintf("attacker: Rate requests in the last %g%% of a window, then a Poisson flood at %g× the limit through the next window; repeated every two windows", 100*edgeFraction, floodRate), sc.Clients, sc.Periods, (*gen).burstFlood},
		{"many-clients", fmt.Sprintf("%d clients, Poisson each, Pareto-distributed rates (shape %g, median %g× the limit, capped at %g×)", sc.ManyClients, paretoShape, paretoMedian, paretoCap), sc.ManyClients, sc.ManyPeriods, (*gen).many},
	}
	traces := make([]Trace, 0, len(kinds))
	for i, k := range kinds {
		g := &gen{
			rng:     rand.New(rand.NewPCG(seed, uint64(i)+1)),
			rate:    float64(l.Rate),
			P:       P,
			start:   start,
			end:     start + int64(k.periods)*P,
			clients: k.clients,
		}
		k.fill(g)
		slices.SortFunc(g.reqs, func(a, b Request) int {
			return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Client, b.Client))
		})
		traces = append(traces, Trace{Name: k.name, Title: k.title, Clients: k.clients, Start: g.start, End: g.end, Requests: g.reqs})
	}
	return traces, nil
}

// gen builds one trace.
type gen struct {
	rng        *rand.Rand
	rate       float64 // the limit's Rate
	P          int64   // the Period in µs
	start, end int64
	clients    int
	reqs       []Request
}

// poisson adds Poisson arrivals of client c in [from, to) at mult times the
// limit.
func (g *gen) poisson(c int, from, to int64, mult float64) {
	if mult <= 0 {
		return
	}
	mean := float64(g.P) / (mult * g.rate) // µs between arrivals
	for t := float64(from) + g.rng.ExpFloat64()*mean; t < float64(to); t += g.rng.ExpFloat64() * mean {
		g.reqs = append(g.reqs, Request{At: int64(t), Client: int32(c)})
	}
}

// uniform adds n arrivals of client c spread uniformly at random over
// [from, to).
func (g *gen) uniform(c int, from, to int64, n int) {
	for range n {
		g.reqs = append(g.reqs, Request{At: from + g.rng.Int64N(max(to-from, 1)), Client: int32(c)})
	}
}

func (g *gen) steady(mult float64) {
	for c := range g.clients {
		g.poisson(c, g.start, g.end, mult)
	}
}

func (g *gen) bursty() {
	P := float64(g.P)
	for c := range g.clients {
		t := g.start + int64(g.rng.ExpFloat64()*burstyOffMean*P) // start in an off phase
		for t < g.end {
			on := min(t+int64(g.rng.ExpFloat64()*burstyOnMean*P), g.end)
			g.poisson(c, t, on, burstyOn)
			t = on + int64(g.rng.ExpFloat64()*burstyOffMean*P)
		}
	}
}

// edge is the width of the attackers' bursts in µs (at least 1).
func (g *gen) edge() int64 { return max(int64(edgeFraction*float64(g.P)), 1) }

func (g *gen) boundary() {
	n, d := int(g.rate), g.edge()
	for c := range g.clients {
		for b := g.start + g.P; b+d <= g.end; b += 2 * g.P {
			g.uniform(c, b-d, b, n)
			g.uniform(c, b, b+d, n)
		}
	}
}

func (g *gen) burstFlood() {
	n, d := int(g.rate), g.edge()
	for c := range g.clients {
		for b := g.start + g.P; b+g.P <= g.end; b += 2 * g.P {
			g.uniform(c, b-d, b, n)
			g.poisson(c, b, b+g.P, floodRate)
		}
	}
}

func (g *gen) many() {
	scale := paretoMedian / math.Pow(2, 1/paretoShape) // the Pareto minimum
	for c := range g.clients {
		u := 1 - g.rng.Float64() // (0, 1]
		g.poisson(c, g.start, g.end, min(scale/math.Pow(u, 1/paretoShape), paretoCap))
	}
}
