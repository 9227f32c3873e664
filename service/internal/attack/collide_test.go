package attack

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// nasty is the alphabet of generated names: every separator and escape a
// key could be built with (ours, Redis's hash tags, Envoy's identity).
var nasty = []string{"a", "b", ":", "|", "=", `\`, "{", "}", "%", "#", "\x00", "/", ".", ",", "*", " ", "\u00e9", "\xff", "%7B", "\\|"}

// randName returns a name of 1 to max pieces of nasty (or, one time in
// eight, a long one differing only past 200 bytes, where the Redis store
// hashes keys).
func randName(r *rand.Rand, max int, utf8Only bool) string {
	var b strings.Builder
	if r.IntN(8) == 0 {
		b.WriteString(strings.Repeat("L", 200+r.IntN(4)))
	}
	for range 1 + r.IntN(max) {
		p := nasty[r.IntN(len(nasty))]
		if utf8Only && !utf8.ValidString(p) {
			p = "?"
		}
		b.WriteString(p)
	}
	return b.String()
}

const collideRules = `
rules:
  - name: k
    dimension: user
    algorithm: fixed_window
    rate: 3
    period: 1h
  - name: K
    dimension: User
    algorithm: fixed_window
    rate: 3
    period: 1h
  - name: "k:a"
    dimension: "user:a"
    algorithm: fixed_window
    rate: 3
    period: 1h
  - name: "k.a"
    dimension: user.a
    algorithm: fixed_window
    rate: 3
    period: 1h
`

// TestAttackNeverSharesCounter: distinct (dimension, identifier) pairs
// built of separators, escapes, NULs, non-UTF-8 bytes and long shared
// prefixes never share a counter: each pair's first check of a fresh
// counter leaves exactly rate-1 (any sharing with an earlier pair would
// leave less), on memory and Redis, through the engine and over gRPC.
func TestAttackNeverSharesCounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dims := []string{"user", "User", "user:a", "user.a"}
	addr := newRedis(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var store core.Store
			if backend == "memory" {
				store = memStore(t)
			} else {
				store = redisStore(t, addr)
			}
			s := startStack(t, store, collideRules)
			r := rand.New(rand.NewPCG(14, uint64(len(backend))))
			seen := map[[2]string]bool{}
			for i := 0; len(seen) < 400 && i < 4000; i++ {
				viaGRPC := i%2 == 0
				dim, id := dims[r.IntN(len(dims))], randName(r, 6, viaGRPC)
				if i%5 == 0 { // the same identifier under another dimension
					for k := range seen {
						id = k[1]
						break
					}
				}
				if seen[[2]string{dim, id}] || viaGRPC && !utf8.ValidString(id) {
					continue
				}
				seen[[2]string{dim, id}] = true
				var remaining int64
				if viaGRPC {
					resp, err := s.native.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: dim, Identifier: id, Cost: proto.Int64(1)})
					require.NoError(t, err)
					remaining = resp.GetRemaining()
				} else {
					res, err := s.eng.Check(ctx, engine.Check{Dimension: dim, Identifier: id, Cost: 1})
					require.NoError(t, err)
					remaining = res.Remaining
				}
				require.Equal(t, int64(2), remaining, "(%q, %q) shares a counter with an earlier pair", dim, id)
			}
			require.Len(t, seen, 400)
		})
	}
}

// TestAttackEnvoyNeverSharesCounter: distinct two-level descriptors whose
// values hold Envoy's identity separators (| = \) never share a counter
// (the naive join of "a=x|b" and "b=y" would), on memory and Redis.
func TestAttackEnvoyNeverSharesCounter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	yaml := `
domain: edge
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit:
          unit: hour
          requests_per_unit: 3
  - key: "a|b"
    rate_limit:
      unit: hour
      requests_per_unit: 3
`
	addr := newRedis(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var store core.Store
			if backend == "memory" {
				store = memStore(t)
			} else {
				store = redisStore(t, addr)
			}
			s := startStack(t, store, yaml)
			r := rand.New(rand.NewPCG(41, uint64(len(backend))))
			seen := map[string]bool{}
			for i := 0; len(seen) < 300 && i < 3000; i++ {
				viaGRPC := i%2 == 0
				va, vb := randName(r, 5, viaGRPC), randName(r, 5, viaGRPC)
				k := va + "\x01\x02" + vb
				if seen[k] {
					continue
				}
				seen[k] = true
				var remaining int64
				if viaGRPC {
					resp, err := s.envoy.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
						Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: va}, {Key: "b", Value: vb}},
					}}})
					require.NoError(t, err)
					remaining = int64(resp.GetStatuses()[0].GetLimitRemaining())
				} else {
					res, err := s.eng.Descriptors(ctx, "edge", []engine.Descriptor{{Entries: []rules.Entry{{Key: "a", Value: va}, {Key: "b", Value: vb}}, Cost: 1}})
					require.NoError(t, err)
					remaining = res.Statuses[0].Result.Remaining
				}
				require.Equal(t, int64(2), remaining, "(a=%q, b=%q) shares a counter with an earlier descriptor", va, vb)
			}
			// The one-level rule "a|b" keyed by the value of a two-level
			// descriptor's join never meets it either.
			res, err := s.eng.Descriptors(ctx, "edge", []engine.Descriptor{{Entries: []rules.Entry{{Key: "a|b", Value: ""}}, Cost: 1}})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Statuses[0].Result.Remaining)
		})
	}
}
