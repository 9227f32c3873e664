package membench_test

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/bench/membench"
)

// tiny makes testing.Benchmark run every scenario for n iterations, on small
// key sets, for the duration of the test.
func tiny(t *testing.T, n string) {
	t.Helper()
	bt := flag.Lookup("test.benchtime")
	require.NotNil(t, bt)
	old := bt.Value.String()
	require.NoError(t, flag.Set("test.benchtime", n))
	heap, many := membench.HeapKeys, membench.ManyKeys
	membench.HeapKeys, membench.ManyKeys = 3000, 3000
	t.Cleanup(func() {
		_ = flag.Set("test.benchtime", old)
		membench.HeapKeys, membench.ManyKeys = heap, many
	})
}

// TestScenarios runs every scenario for every implementation on a tiny run:
// the scenarios' own checks (the first burst admitted on a hot key and not
// more than the limit allows, nothing denied over many fresh keys, every key
// resident in the heap scenario) must pass.
func TestScenarios(t *testing.T) {
	tiny(t, "3000x")
	for _, sc := range membench.Scenarios() {
		if sc.Heap {
			require.NoError(t, flag.Set("test.benchtime", "1x")) // each iteration fills a limiter
		}
		for _, impl := range membench.Impls() {
			t.Run(sc.Name+"/"+impl.Name, func(t *testing.T) {
				r := testing.Benchmark(func(b *testing.B) { sc.Run(b, impl) })
				require.NotZero(t, r.N, "failed: %s", membench.LastFailure())
				if sc.Heap {
					require.Greater(t, r.Extra["bytes/key"], 8.0, "a resident key costs some heap")
					require.Less(t, r.Extra["bytes/key"], 4096.0)
				}
			})
		}
	}
}

// TestAdmitCounts checks each implementation's limit directly: on one key,
// 3000 decisions in a burst admit the first Rate and little more.
func TestAdmitCounts(t *testing.T) {
	for _, impl := range membench.Impls() {
		t.Run(impl.Name, func(t *testing.T) {
			l, err := impl.New(membench.Config{})
			require.NoError(t, err)
			defer l.Close()
			allowed := 0
			for i := range 3 * membench.Rate {
				ok := l.Allow("k")
				if i < membench.Rate {
					require.True(t, ok, "decision %d denied within the burst", i)
				}
				if ok {
					allowed++
				}
			}
			// Under -race a decision can take a few µs: allow the refill of
			// up to a quarter of the period.
			require.LessOrEqual(t, allowed, membench.Rate+membench.Rate/4)
			require.True(t, l.Allow("other"), "another key has its own budget")
		})
	}
}

// always admits everything: a limiter configured without a limit.
type always struct{}

func (always) Allow(string) bool { return true }
func (always) Close() error      { return nil }

// never admits nothing.
type never struct{}

func (never) Allow(string) bool { return false }
func (never) Close() error      { return nil }

// TestChecksFail makes sure the scenarios' checks catch a misconfigured
// limiter: one that never limits fails the hot-key scenarios, one that
// denies everything fails the many-keys scenarios.
func TestChecksFail(t *testing.T) {
	tiny(t, "5000x")
	unlimited := membench.Impl{Name: "always", New: func(membench.Config) (membench.Limiter, error) { return always{}, nil }}
	closed := membench.Impl{Name: "never", New: func(membench.Config) (membench.Limiter, error) { return never{}, nil }}
	cases := []struct {
		run  func(*testing.B, membench.Impl)
		impl membench.Impl
		want string
	}{
		{membench.HotKeySerial, unlimited, "decisions on one key allowed"},
		{membench.HotKeyParallel, unlimited, "decisions on one key allowed"},
		{membench.Keys100kSerial, closed, "first decision"},
		{membench.Keys100kParallel, closed, "first decision"},
	}
	for _, c := range cases {
		r := testing.Benchmark(func(b *testing.B) { c.run(b, c.impl) })
		require.Zero(t, r.N)
		require.Contains(t, membench.LastFailure(), c.want)
	}
}
