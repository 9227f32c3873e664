package attack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// algorithms are the six, as the rules file names them.
var algorithms = []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_window_log", "sliding_window_counter", "gcra"}

// oneLimit is a rules file of one rule, "one", of rate units per hour (no
// refill worth counting within a test) counted by user.
func oneLimit(algorithm string, rate int) string {
	return fmt.Sprintf(`
rules:
  - name: one
    dimension: user
    algorithm: %s
    rate: %d
    period: 1h
`, algorithm, rate)
}

// TestAttackOneLimitEveryDoor: concurrent callers spend one user's limit
// through every front door at once (native check, native all-or-nothing
// batch, native Report, HTTP check with a JSON body and bodiless with query
// parameters) on one instance on memory, and on two instances on one
// redis-server: the units admitted never exceed the limit, and the limit
// is spent (all but a batch's last unit). (The store API is not a door to
// a rule's counters: its keys have a namespace of their own.)
func TestAttackOneLimitEveryDoor(t *testing.T) {
	const rate = 30
	addr := newRedis(t)
	for _, algorithm := range algorithms {
		for _, backend := range []string{"memory", "redis"} {
			t.Run(algorithm+"/"+backend, func(t *testing.T) {
				yaml := oneLimit(algorithm, rate)
				var stacks []*stack
				if backend == "memory" {
					stacks = []*stack{startStack(t, memStore(t), yaml)}
				} else {
					stacks = []*stack{startStack(t, redisStore(t, addr), yaml), startStack(t, redisStore(t, addr), yaml)}
				}
				user := "victim-" + algorithm + "-" + backend
				admitted := spend(t, stacks, user)
				require.LessOrEqual(t, admitted, int64(rate), "more than the limit admitted")
				require.GreaterOrEqual(t, admitted, int64(rate-1), "the limit was not spent")
				// And every door now denies.
				resp, err := stacks[len(stacks)-1].native.CheckRateLimit(context.Background(), &ratelimitv1.CheckRequest{Identifier: user, Dimension: "user", Cost: proto.Int64(1)})
				require.NoError(t, err)
				require.False(t, resp.GetAllowed())
			})
		}
	}
}

// spend runs callers through every door of stacks against user's limit
// until each has seen enough denials, and returns the units admitted.
func spend(t *testing.T, stacks []*stack, user string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	const callers, calls = 5, 24 // per stack and door kind: bounded
	for si, s := range stacks {
		for k := range callers {
			door := (si + k) % callers
			wg.Go(func() {
				for range calls {
					var n int64
					switch door {
					case 0: // native single
						r, err := s.native.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Identifier: user, Dimension: "user", Cost: proto.Int64(1)})
						if !assertNoErr(t, err) {
							return
						}
						if r.GetAllowed() {
							n = 1
						}
					case 1: // native batch, all or nothing: two checks of the counter
						c := &ratelimitv1.CheckRequest{Identifier: user, Dimension: "user", Cost: proto.Int64(1)}
						r, err := s.native.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{c, c}, AllOrNothing: true})
						if !assertNoErr(t, err) {
							return
						}
						a, b := r.GetResults()[0].GetResponse(), r.GetResults()[1].GetResponse()
						if a == nil || b == nil || a.GetAllowed() != b.GetAllowed() {
							t.Errorf("batch results split: %v", r)
							return
						}
						if a.GetAllowed() {
							n = 2
						}
					case 2: // HTTP check
						code, body := s.httpCheck(t, map[string]any{"key_type": "user", "key_value": user})
						if code != http.StatusOK {
							t.Errorf("HTTP %d %v", code, body)
							return
						}
						if body["allowed"] == true {
							n = 1
						}
					case 3: // HTTP check, bodiless (query parameters, as nginx's auth_request sends them)
						code, body := s.httpGet(t, url.Values{"key_type": {"user"}, "key_value": {user}})
						if code != http.StatusOK {
							t.Errorf("HTTP %d %v", code, body)
							return
						}
						if body["allowed"] == true {
							n = 1
						}
					case 4: // Report: charged after; allowed only when it fitted
						r, err := s.native.Report(ctx, &ratelimitv1.CheckRequest{Identifier: user, Dimension: "user", Cost: proto.Int64(1)})
						if !assertNoErr(t, err) {
							return
						}
						if r.GetAllowed() {
							n = 1
						}
					}
					admitted.Add(n)
				}
			})
		}
	}
	wg.Wait()
	return admitted.Load()
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("call failed: %v", err)
		return false
	}
	return true
}
