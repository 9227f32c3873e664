package attack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rules"
)

// pairRules is a rule set whose two rules (x, y) both count user checks
// with the same limit rate: a check decided by one rule set sees one rate
// in both results. It is written as one flow sequence, so every strict
// prefix of it (a poll catching a file rewritten in place) is invalid YAML:
// in block style, a prefix ending after x is a valid one-rule set, which the
// source rightly applies, and the test would see a "mixed" set that no swap
// made.
func pairRules(rate int) string {
	return fmt.Sprintf(`rules: [
  {name: x, dimension: user, algorithm: fixed_window, rate: %[1]d, period: 1h},
  {name: y, dimension: user, algorithm: token_bucket, rate: %[1]d, period: 1h}
]
`, rate)
}

// TestAttackReloadUnderLoad: the rules file is rewritten as fast as the
// source polls, in place (half-written files caught) and by rename,
// alternating two rule sets and a broken file, while callers check: every
// check is decided (no error) by one whole rule set (both rules at one
// rate), and the broken file never replaces the last good set.
func TestAttackReloadUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := &refusals{}
	s := startStackWith(t, memStore(t), pairRules(1000), []rules.Option{rules.WithPollInterval(time.Millisecond)}, engine.WithObserver(refused))
	var stop atomic.Bool
	var checks, seen1000, seen2000 atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for n := 0; !stop.Load() && n < 20000; n++ {
				res, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: fmt.Sprintf("u%d-%d", i, n%50), Cost: 1})
				if err != nil {
					t.Errorf("check failed during reloads: %v", err)
					return
				}
				rs := res.Decision.Results
				if len(rs) != 2 || rs[0].Limit.Rate != rs[1].Limit.Rate {
					t.Errorf("a check decided by a mixed rule set: %+v", rs)
					return
				}
				switch rs[0].Limit.Rate {
				case 1000:
					seen1000.Add(1)
				case 2000:
					seen2000.Add(1)
				default:
					t.Errorf("rate %d from no rule set", rs[0].Limit.Rate)
					return
				}
				checks.Add(1)
			}
		})
	}
	dir := filepath.Dir(s.rules)
	bodies := []string{pairRules(2000), "rules: [ {name: x, dimension: user, rate: -1 ", pairRules(1000), "\x00\xff garbage", pairRules(2000)}
	for round := range 60 {
		body := bodies[round%len(bodies)]
		if round%2 == 0 { // in place: a poll may catch it half-written
			f, err := os.OpenFile(s.rules, os.O_WRONLY|os.O_TRUNC, 0o600)
			require.NoError(t, err)
			for k := 0; k < len(body); k += 7 {
				_, err = f.WriteString(body[k:min(k+7, len(body))])
				require.NoError(t, err)
			}
			require.NoError(t, f.Close())
		} else { // by rename
			tmp := filepath.Join(dir, "next.tmp")
			require.NoError(t, os.WriteFile(tmp, []byte(body), 0o600))
			require.NoError(t, os.Rename(tmp, s.rules))
		}
		time.Sleep(5 * time.Millisecond) // the writer's pace: about 5 polls between two writes
	}
	// The last write is a broken file... then a good one: the good one holds.
	before := refused.n.Load()
	require.NoError(t, os.WriteFile(s.rules, []byte("rules: [oops"), 0o600))
	require.Eventually(t, func() bool { return refused.n.Load() > before }, 10*time.Second, time.Millisecond, "the broken file was never read")
	rev := s.eng.Snapshot().Revision()
	res, err := s.eng.Check(ctx, engine.Check{Dimension: "user", Identifier: "after", Cost: 1})
	require.NoError(t, err)
	require.Len(t, res.Decision.Results, 2, "the broken file replaced the rules")
	stop.Store(true)
	wg.Wait()
	require.Equal(t, rev, s.eng.Snapshot().Revision())
	t.Logf("%d checks: %d under 1000, %d under 2000", checks.Load(), seen1000.Load(), seen2000.Load())
	require.Positive(t, seen1000.Load())
	require.Positive(t, seen2000.Load())
}

// refusals counts the rule sets an engine refused (an engine.Observer).
type refusals struct{ n atomic.Int64 }

func (r *refusals) Decided(context.Context, *engine.Event) {}

func (r *refusals) Reloaded(_ *rules.Snapshot, err error) {
	if err != nil {
		r.n.Add(1)
	}
}
