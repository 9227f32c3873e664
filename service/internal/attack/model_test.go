package attack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

const modelRules = `
rules:
  - name: base
    dimension: user
    algorithm: fixed_window
    rate: 10
    period: 1h
  - name: heavy
    dimension: user
    endpoints: [/heavy]
    algorithm: fixed_window
    rate: 4
    period: 1h
`

// model is the exact count of fixed windows that the service must match.
type model struct{ used map[[2]string]int64 }

var modelLimit = map[string]int64{"base": 10, "heavy": 4}

func rulesOf(endpoint string) []string {
	if endpoint == "/heavy" {
		return []string{"base", "heavy"}
	}
	return []string{"base"}
}

func (m *model) left(rule, user string) int64 {
	return modelLimit[rule] - m.used[[2]string{rule, user}]
}

// take decides checks all or nothing, as the service must.
func (m *model) take(users, endpoints []string, costs []int64) bool {
	need := map[[2]string]int64{}
	for i := range users {
		for _, r := range rulesOf(endpoints[i]) {
			need[[2]string{r, users[i]}] += costs[i]
		}
	}
	for k, n := range need {
		if n > m.left(k[0], k[1]) {
			return false
		}
	}
	for k, n := range need {
		m.used[k] += n
	}
	return true
}

// TestAttackModel drives random sequences of checks, peeks, independent
// and all-or-nothing batches, reports and resets over real gRPC, on
// memory and Redis, and compares every decision and remaining count with
// an exact model of the two rules' fixed windows.
func TestAttackModel(t *testing.T) {
	addr := newRedis(t)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// The windows are aligned on the hour: a frozen clock keeps
			// every check in one.
			store, now := frozenStore(t, backend, addr)
			s := startStack(t, store, modelRules, engine.WithClock(now))
			c := s.native
			m := &model{used: map[[2]string]int64{}}
			r := rand.New(rand.NewPCG(2026, uint64(len(backend))))
			users := []string{"u1-" + backend, "u2-" + backend, "u3-" + backend}
			endpoints := []string{"/light", "/heavy"}
			req := func(user, endpoint string, cost int64) *ratelimitv1.CheckRequest {
				return &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user, Endpoint: endpoint, Cost: proto.Int64(cost)}
			}
			minLeft := func(user, endpoint string) int64 {
				v := int64(1 << 62)
				for _, rule := range rulesOf(endpoint) {
					v = min(v, m.left(rule, user))
				}
				return v
			}
			for step := range 400 {
				u, ep := users[r.IntN(len(users))], endpoints[r.IntN(len(endpoints))]
				cost := int64(r.IntN(4))
				where := fmt.Sprintf("step %d", step)
				switch op := r.IntN(10); {
				case op < 4: // check (cost 0: a peek)
					resp, err := c.CheckRateLimit(ctx, req(u, ep, cost))
					require.NoError(t, err, where)
					var want bool
					if cost == 0 {
						want = minLeft(u, ep) >= 1
					} else {
						want = m.take([]string{u}, []string{ep}, []int64{cost})
					}
					require.Equal(t, want, resp.GetAllowed(), "%s: check %s %s cost %d", where, u, ep, cost)
					if want {
						require.Equal(t, minLeft(u, ep), resp.GetRemaining(), "%s: remaining", where)
					}
				case op < 6: // all-or-nothing batch of 2-3 checks (no peeks)
					n := 2 + r.IntN(2)
					var bu, be []string
					var bc []int64
					var checks []*ratelimitv1.CheckRequest
					for range n {
						bu, be, bc = append(bu, users[r.IntN(len(users))]), append(be, endpoints[r.IntN(2)]), append(bc, int64(1+r.IntN(3)))
						checks = append(checks, req(bu[len(bu)-1], be[len(be)-1], bc[len(bc)-1]))
					}
					resp, err := c.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: checks, AllOrNothing: true})
					require.NoError(t, err, where)
					want := m.take(bu, be, bc)
					for i, res := range resp.GetResults() {
						require.Nil(t, res.GetError(), where)
						require.Equal(t, want, res.GetResponse().GetAllowed(), "%s: batch check %d", where, i)
					}
				case op < 7: // independent batch: in order
					n := 2 + r.IntN(3)
					var checks []*ratelimitv1.CheckRequest
					var wants []bool
					for range n {
						bu, be, bc := users[r.IntN(len(users))], endpoints[r.IntN(2)], int64(1+r.IntN(3))
						checks = append(checks, req(bu, be, bc))
						wants = append(wants, m.take([]string{bu}, []string{be}, []int64{bc}))
					}
					resp, err := c.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: checks})
					require.NoError(t, err, where)
					for i, res := range resp.GetResults() {
						require.Equal(t, wants[i], res.GetResponse().GetAllowed(), "%s: independent batch check %d", where, i)
					}
				case op < 9: // report: charged after, draining what does not fit
					cost++ // at least 1
					resp, err := c.Report(ctx, req(u, ep, cost))
					require.NoError(t, err, where)
					fits := m.take([]string{u}, []string{ep}, []int64{cost})
					if !fits {
						for _, rule := range rulesOf(ep) {
							m.used[[2]string{rule, u}] += min(cost, m.left(rule, u))
						}
					}
					require.Equal(t, fits, resp.GetAllowed(), "%s: report %s %s cost %d", where, u, ep, cost)
					require.Equal(t, minLeft(u, ep), resp.GetRemaining(), "%s: remaining after report", where)
				default: // reset
					_, err := c.ResetLimit(ctx, &ratelimitv1.ResetRequest{Dimension: "user", Identifier: u, Endpoint: ep})
					require.NoError(t, err, where)
					for _, rule := range rulesOf(ep) {
						delete(m.used, [2]string{rule, u})
					}
				}
			}
		})
	}
}
