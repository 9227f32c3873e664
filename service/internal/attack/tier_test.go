package attack

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

const tierRules = `
rules:
  - name: api
    dimension: user
    endpoints: [/api/**]
    algorithm: fixed_window
    rate: 6
    period: 1h
    tiers:
      pro: {algorithm: fixed_window, rate: 15, period: 1h}
tier_assignments:
  user:
    alice: pro
`

// TestAttackTierEveryPath: a caller's tier decides its limit on every path
// to its counter (a plain check, a check naming the rule, an independent
// and an all-or-nothing batch, Report), and the paths share one counter:
// exactly the tier's limit is admitted, for a tiered and a default caller.
func TestAttackTierEveryPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startStack(t, memStore(t), tierRules)
	for user, limit := range map[string]int{"alice": 15, "bob": 6} {
		admitted := 0
		req := func(rule string) *ratelimitv1.CheckRequest {
			return &ratelimitv1.CheckRequest{Dimension: "user", Identifier: user, Endpoint: "/api/v1/x", RuleId: rule, Cost: proto.Int64(1)}
		}
		for i := range 40 {
			var allowed []bool
			switch i % 5 {
			case 0:
				r, err := s.native.CheckRateLimit(ctx, req(""))
				require.NoError(t, err)
				require.Equal(t, int64(limit), r.GetLimit(), user)
				allowed = []bool{r.GetAllowed()}
			case 1:
				r, err := s.native.CheckRateLimit(ctx, req("api"))
				require.NoError(t, err)
				require.Equal(t, int64(limit), r.GetLimit(), "%s naming the rule", user)
				allowed = []bool{r.GetAllowed()}
			case 2, 3:
				b, err := s.native.CheckRateLimitBatch(ctx, &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{req(""), req("api")}, AllOrNothing: i%5 == 3})
				require.NoError(t, err)
				for _, res := range b.GetResults() {
					require.Nil(t, res.GetError())
					require.Equal(t, int64(limit), res.GetResponse().GetLimit(), "%s in a batch (all or nothing %v)", user, i%5 == 3)
					allowed = append(allowed, res.GetResponse().GetAllowed())
				}
			case 4:
				r, err := s.native.Report(ctx, req(""))
				require.NoError(t, err)
				require.Equal(t, int64(limit), r.GetLimit(), "%s Report", user)
				allowed = []bool{r.GetAllowed()}
			}
			for _, a := range allowed {
				if a {
					admitted++
				}
			}
		}
		require.Equal(t, limit, admitted, user)
	}
}
