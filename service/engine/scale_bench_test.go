package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// Rules at scale: decision latency, snapshot build time and
// memory with 10, 1 000 and 100 000 native rules in force. Every size holds
// the same few rules the measured check matches; the others are spread as a
// large deployment's would be, so only the rule count changes:
//
//	go test -run XXX -bench Scale -benchmem ./engine

// scaleSizes are the rule counts compared.
var scaleSizes = []int{10, 1000, 100_000}

// scaleDimensions are the dimensions the rules are spread over, in turn.
var scaleDimensions = []string{"user", "ip", "api_key", "tenant"}

// scaleResources is the number of resources per service: each has a rule on
// its collection (/api/v1/sS/rR) and one on its items (/api/v1/sS/rR/:id),
// and each service one on everything under it (/api/v1/sS/**).
const scaleResources = 20

// scaleEndpoint is the endpoint of the measured check: in every rule set it
// matches, of dimension user, the rule for every endpoint, /api/v1/s0/** and
// /api/v1/s0/r0/:id (the rules of the other dimensions with those patterns
// are in other limiters of the engine).
const scaleEndpoint = "/api/v1/s0/r0/42"

// scaleRules returns n native rules: rule i is of dimension
// scaleDimensions[i%4]; the first of each dimension applies to every
// endpoint, the others have one endpoint pattern each, service by service
// (/api/v1/sS/**, then /api/v1/sS/rR/:id and /api/v1/sS/rR for each
// resource). Every rule is a token bucket of 10^9 per second, never emptied.
func scaleRules(n int) []*rules.Rule {
	out := make([]*rules.Rule, n)
	per := 1 + 2*scaleResources
	lim := core.PerSecond(1_000_000_000)
	for i := range out {
		dim := scaleDimensions[i%len(scaleDimensions)]
		r := &rules.Rule{ID: fmt.Sprintf("r%d-%s", i, dim), Dimension: dim, Limit: lim,
			Source: rules.Position{File: "scale", Line: i + 1}}
		if k := i / len(scaleDimensions); k > 0 {
			j := k - 1
			s, m := j/per, j%per
			switch {
			case m == 0:
				r.Endpoints = []string{fmt.Sprintf("/api/v1/s%d/**", s)}
			case m%2 == 1:
				r.Endpoints = []string{fmt.Sprintf("/api/v1/s%d/r%d/:id", s, (m-1)/2)}
			default:
				r.Endpoints = []string{fmt.Sprintf("/api/v1/s%d/r%d", s, (m-2)/2)}
			}
		}
		out[i] = r
	}
	return out
}

func scaleSnapshot(b *testing.B, n int) *rules.Snapshot {
	b.Helper()
	s, err := rules.New("scale-"+strconv.Itoa(n), scaleRules(n), nil)
	if err != nil {
		b.Fatal(err)
	}
	if got := len(s.Match("", "user", scaleEndpoint)); got != 3 {
		b.Fatalf("%d rules: the check matches %d user rules, want 3", n, got)
	}
	return s
}

// BenchmarkScaleCheck is one engine.Check (cost 1, memory store) under n
// rules, from one goroutine over 1024 users. The target: no measurable
// change from 10 to 100 000 rules.
func BenchmarkScaleCheck(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	for _, n := range scaleSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			e, err := engine.New(context.Background(), memStore(b), newSource(scaleSnapshot(b, n)))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for _, id := range ids { // every key exists before the timer starts
				if _, err := e.Check(ctx, engine.Check{Dimension: "user", Identifier: id, Endpoint: scaleEndpoint, Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r, err := e.Check(ctx, engine.Check{Dimension: "user", Identifier: ids[i&1023], Endpoint: scaleEndpoint, Cost: 1})
				if err != nil || !r.Allowed || len(r.Decision.Results) != 3 {
					b.Fatalf("check: %v, allowed %v, %d rules applied (want 3)", err, r.Allowed, len(r.Decision.Results))
				}
			}
		})
	}
}

// BenchmarkScaleSnapshot is rules.New of n rules (built once, outside the
// loop): the validation and indexing a source does on every load. It also
// reports the live heap one snapshot holds with its rules (heap-MB).
func BenchmarkScaleSnapshot(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			rs := scaleRules(n)
			heap := retained(func() any {
				s, err := rules.New("scale", scaleRules(n), nil)
				if err != nil {
					b.Fatal(err)
				}
				return s
			})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rules.New("scale", rs, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(heap/1e6, "heap-MB") // after the loop, which deletes metrics reported before it
		})
	}
}

// BenchmarkScaleEngineBuild is engine.New on a snapshot of n rules (built
// once, outside the loop): the limiters the engine compiles each time a
// snapshot is put in force. heap-MB is the live heap of one engine beyond
// its snapshot.
func BenchmarkScaleEngineBuild(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			snap := scaleSnapshot(b, n)
			store := memStore(b)
			src := newSource(snap)
			ctx := context.Background()
			heap := retained(func() any {
				e, err := engine.New(ctx, store, src)
				if err != nil {
					b.Fatal(err)
				}
				return e
			})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := engine.New(ctx, store, src); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(heap/1e6, "heap-MB")
		})
	}
}

// retained returns the growth of the live heap while what build returns is
// alive, in bytes.
func retained(build func() any) float64 {
	before := liveHeap()
	v := build()
	after := liveHeap()
	runtime.KeepAlive(v)
	return float64(after) - float64(before)
}

// liveHeap is HeapAlloc after garbage collections, repeated until it stops
// shrinking (at most 5; runtime.GC returns once its cycle, sweep included,
// is done).
func liveHeap() uint64 {
	var m runtime.MemStats
	last := ^uint64(0)
	for range 5 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.HeapAlloc >= last {
			break
		}
		last = m.HeapAlloc
	}
	return m.HeapAlloc
}
