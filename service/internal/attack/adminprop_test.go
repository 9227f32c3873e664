package attack

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/adminauth"
)

// TestAttackAdminRandomWritesAlwaysLoad: random admin writes (rules with
// and without tiers, enabled and disabled, odd endpoint patterns and
// dimensions; replaced, deleted; tiers; overrides of any rule) through the
// API: after every accepted write the database's rule set loads and the
// engine serves its revision (a refused one changes nothing). 600 writes,
// fixed seeds.
func TestAttackAdminRandomWritesAlwaysLoad(t *testing.T) {
	s := startAdminStack(t, "", memStore(t), adminauth.Options{WritesPerMinute: 100000, ReadsPerMinute: 100000}, "ops")
	rng := rand.New(rand.NewPCG(15, 2026))
	ids := []string{"a", "b", "c", "d", "e", "f"}
	dims := []string{"user", "ip", "user"}
	eps := []string{"", "/api/**", "/api/*/x", "/api/{id}", "/x", "/api/**"}
	algs := []string{"token_bucket", "leaky_bucket", "gcra", "fixed_window", "sliding_window_log", "sliding_window_counter"}
	tiers := []string{"", "", "pro", "free"}
	rule := func() map[string]any {
		return map[string]any{"id": ids[rng.IntN(len(ids))], "name": "n", "dimension": dims[rng.IntN(len(dims))],
			"endpoint_pattern": eps[rng.IntN(len(eps))], "limit": 1 + rng.IntN(100), "window_seconds": 1 + rng.IntN(3600),
			"algorithm": algs[rng.IntN(len(algs))], "tier": tiers[rng.IntN(len(tiers))], "burst": rng.IntN(3) * 10,
			"shadow": rng.IntN(4) == 0, "enabled": rng.IntN(5) != 0}
	}
	accepted := map[int]int{}
	for i := range 600 {
		before, err := s.db.Revision(s.ctx)
		require.NoError(t, err)
		var st int
		var body []byte
		var what string
		switch op := rng.IntN(8); op {
		case 0, 1:
			r := rule()
			what = fmt.Sprintf("POST %v", r)
			st, _, body = s.do("ops", http.MethodPost, "/api/v1/rules", r)
		case 2, 3:
			r := rule()
			what = fmt.Sprintf("PUT %v", r)
			st, _, body = s.do("ops", http.MethodPut, "/api/v1/rules/"+r["id"].(string), r, "If-Match", "*")
		case 4:
			id := ids[rng.IntN(len(ids))]
			what = "DELETE " + id
			st, _, body = s.do("ops", http.MethodDelete, "/api/v1/rules/"+id, nil, "If-Match", "*")
		case 5:
			what = "tier"
			st, _, body = s.do("ops", http.MethodPut, fmt.Sprintf("/api/v1/users/u%d/tier?dimension=%s", rng.IntN(5), dims[rng.IntN(len(dims))]),
				map[string]any{"tier": tiers[rng.IntN(len(tiers))]})
		default:
			o := map[string]any{"rule_id": ids[rng.IntN(len(ids))], "ttl_seconds": 1 + rng.IntN(600)}
			if rng.IntN(3) == 0 {
				o["block"] = true
			} else {
				o["limit"], o["window_seconds"] = 1+rng.IntN(100), 1+rng.IntN(3600)
			}
			what = fmt.Sprintf("override %v", o)
			st, _, body = s.do("ops", http.MethodPost, fmt.Sprintf("/api/v1/users/u%d/override?dimension=%s", rng.IntN(5), dims[rng.IntN(len(dims))]), o)
		}
		accepted[st]++
		after, err := s.db.Revision(s.ctx)
		require.NoError(t, err)
		require.Less(t, st, 500, "write %d %s: %s", i, what, body)
		if st >= 300 {
			require.Equal(t, before, after, "write %d refused (%d) but wrote: %s", i, st, what)
			continue
		}
		_, err = s.db.Source(0).Load(s.ctx)
		require.NoError(t, err, "write %d accepted (%d): %s; the database no longer loads", i, st, what)
		s.waitRevision()
	}
	t.Logf("statuses: %v", accepted)
	require.Greater(t, accepted[200]+accepted[201]+accepted[204], 120)
}
