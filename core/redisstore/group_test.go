package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/schedlag"
)

// groupRun counts what a hammering of one cross-identity group saw.
type groupRun struct {
	admitted atomic.Int64
	// phantom: groups denied although the tight policy (the only one
	// that can ever fill) allowed them, and denials of a loose policy.
	phantom atomic.Int64
	// unexplained: denied groups with no op reported denied.
	unexplained atomic.Int64
	// exhausted: in a denied group, an op reported allowed without room
	// for its cost, or reported Throttled.
	exhausted atomic.Int64
}

// hammerGroup sends each of callers goroutines each times the group ops
// (ops[0] the tight policy, the others loose ones that can never fill: their
// capacity exceeds the tight one's plus every request in flight), through
// stores in turn.
func hammerGroup(t *testing.T, stores []*redisstore.Store, ops []core.Op, callers, each int) *groupRun {
	t.Helper()
	run, err := hammer(stores, ops, callers, each)
	require.NoError(t, err)
	return run
}

func hammer(stores []*redisstore.Store, ops []core.Op, callers, each int) (*groupRun, error) {
	ctx := context.Background()
	run := &groupRun{}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]core.Result, len(ops))
			for range each {
				if err := stores[g%len(stores)].Take(ctx, ops, out); err != nil {
					errs <- err
					return
				}
				all := true
				for _, r := range out {
					all = all && r.Allowed
				}
				if all {
					run.admitted.Add(1)
					continue
				}
				anyDenied := false
				for i, r := range out {
					switch {
					case !r.Allowed:
						anyDenied = true
						if i > 0 {
							run.phantom.Add(1)
						}
					case r.Remaining < ops[i].Cost || r.State == core.Throttled:
						run.exhausted.Add(1)
					}
				}
				if out[0].Allowed {
					run.phantom.Add(1)
				}
				if !anyDenied {
					run.unexplained.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return run, nil
}

// crossIdentityOps returns a group of three identities: a tight policy of
// capacity tight first, then two loose ones of capacity loose.
func crossIdentityOps(t *testing.T, tight, loose int64, a core.Algorithm) []core.Op {
	return groupOps(limitertest.Key(t).Identity, tight, loose, a)
}

func groupOps(id string, tight, loose int64, a core.Algorithm) []core.Op {
	return []core.Op{
		{Key: core.Key{Identity: "user:" + id, Policy: "per-user"}, Limit: core.Per(tight, time.Hour).WithAlgorithm(a), Cost: 1},
		{Key: core.Key{Identity: "ip:" + id, Policy: "per-ip"}, Limit: core.Per(loose, time.Hour).WithAlgorithm(a), Cost: 1},
		{Key: core.Key{Identity: "{org}:" + id, Policy: "per-org"}, Limit: core.Per(loose, time.Hour).WithAlgorithm(core.GCRA), Cost: 1},
	}
}

// On a standalone server and behind Sentinel every key lives on one server,
// and a group of several identities is decided by one script: hammered by 64
// goroutines through 4 store instances (each with its own client), exactly
// the tight policy's capacity is admitted, no group is denied while the
// tight policy had room, the loose policies are never reported denied (they
// cannot fill), and they consumed exactly what was admitted.
func TestCrossIdentityGroupsHaveNoPhantomDenials(t *testing.T) {
	srv := redistest.StartServer(t)
	sen := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return srv.Client(t) }},
		{"sentinel", func(t *testing.T) redis.UniversalClient { return sen.Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stores := make([]*redisstore.Store, 4)
			for i := range stores {
				stores[i] = newStore(t, tc.client(t), redisstore.WithTimeout(5*time.Second))
			}
			for _, a := range limitertest.Algorithms {
				const tight, loose = 60, 70
				ops := crossIdentityOps(t, tight, loose, a)
				run := hammerGroup(t, stores, ops, 64, 6)
				require.Equal(t, int64(tight), run.admitted.Load(), "%s: admitted", a)
				require.Zero(t, run.phantom.Load(), "%s: phantom denials", a)
				require.Zero(t, run.unexplained.Load(), "%s: denied groups with no denied op", a)
				require.Zero(t, run.exhausted.Load(), "%s: allowed ops reported exhausted", a)
				for _, op := range ops[1:] {
					r, err := limitertest.TakeOne(context.Background(), stores[0], op.Key, op.Limit, 0)
					require.NoError(t, err)
					require.Equal(t, int64(loose-tight), r.Remaining, "%s: %q consumed exactly what was admitted", a, op.Key)
				}
			}
		})
	}
}

// On a Cluster the identities of a group sit in different slots: each is
// decided by its own script and a denial is compensated. Hammered by 64
// goroutines through 4 store instances, exactly the tight capacity is
// admitted, every reported denial is a policy's own denial (the loose
// policies, which cannot fill even counting every request in flight, are
// never reported denied), and the compensation gives back exactly what it
// took: the loose policies consumed what was admitted.
func TestClusterCrossIdentityDenialsAreReal(t *testing.T) {
	cluster := shared.Cluster(t)
	stores := make([]*redisstore.Store, 4)
	for i := range stores {
		stores[i] = newStore(t, cluster.Client(t), redisstore.WithTimeout(5*time.Second))
	}
	for _, a := range limitertest.Algorithms {
		const tight, loose = 60, 60 + 64 + 10
		ops := crossIdentityOps(t, tight, loose, a)
		slots := map[int]bool{}
		for _, op := range ops {
			slots[redistest.Slot(stores[0].Key(op.Key, a))] = true
		}
		require.Len(t, slots, 3, "the identities live in different slots")
		run := hammerGroup(t, stores, ops, 64, 5)
		require.Equal(t, int64(tight), run.admitted.Load(), "%s: admitted", a)
		require.Zero(t, run.phantom.Load(), "%s: denials not made by the tight policy", a)
		require.Zero(t, run.unexplained.Load(), "%s: denied groups with no denied op", a)
		for _, op := range ops[1:] {
			r, err := limitertest.TakeOne(context.Background(), stores[0], op.Key, op.Limit, 0)
			require.NoError(t, err)
			requireGivenBack(t, op, loose-tight, r.Remaining)
		}
	}
}

// requireGivenBack checks that the loose policy op, after a Cluster run in
// which every denied group gave its admissions back, has exactly want units
// left: the compensation gave back exactly what it took.
func requireGivenBack(t *testing.T, op core.Op, want, got int64) {
	t.Helper()
	require.Equal(t, want, got, "%s: %q consumed exactly what was admitted", op.Limit.Algorithm, op.Key)
}

// A group of identities on a standalone server is decided by one call.
func TestCrossIdentityGroupIsOneCall(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newStore(t, srv.Client(t), redisstore.WithTimeout(5*time.Second))
	ctx := context.Background()
	ops := crossIdentityOps(t, 5, 10, core.TokenBucket)
	out := make([]core.Result, len(ops))
	require.NoError(t, s.Take(ctx, ops, out)) // loads the library
	before := scriptCalls(t, srv.Client(t))
	for i := range 8 {
		require.NoError(t, s.Take(ctx, ops, out))
		require.Equal(t, i < 4, out[0].Allowed, "take %d", i)
		require.True(t, out[1].Allowed && out[2].Allowed, "take %d: %+v", i, out)
	}
	after := scriptCalls(t, srv.Client(t))
	require.Equal(t, int64(8), after["fcall"]-before["fcall"], "one FCALL per group: %v", fmt.Sprint(after))
}

// A group denied by one identity while another admitted stays denied when
// the round trip that gives the admission back times out (a proxy adds 150ms
// to every reply; the timeout is 380ms, so the first two round trips, TIME
// for the group's one instant and the decision, have 80ms to spare, and the
// third, sent after the decision's reply, always ends at least 70ms after
// it): through the store and through a fail-open guard, every
// request is denied by the store, none fails open, and the failed
// compensations are counted. The server refuses INFO, so the store cannot
// know it is standalone and compensates as on a Cluster.
//
// A request whose decision itself timed out (this machine stalled for
// more than the spare 80ms) decided nothing and had nothing to give
// back: it is told apart by its failed compensations (none counted) and
// repeated, at most 7 times for each latency.
func TestDeniedGroupStaysDeniedWhenCompensationFails(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	require.NoError(t, srv.Client(t).Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err())
	proxy := redistest.NewProxy(t, srv.Addr)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr, Username: "noinfo", Password: "pw"})
	t.Cleanup(func() { _ = client.Close() })
	const slow, timeout = 150 * time.Millisecond, 380 * time.Millisecond
	s := newStore(t, client, redisstore.WithTimeout(timeout))
	g, err := guard.New(s, guard.WithTimeout(timeout), guard.WithFailOpen(), guard.WithBreaker(guard.Breaker{Failures: 1000}))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 { // four connections in the pool: none is dialed through the latency (the client ignores context deadlines, so a call that times out keeps its connection)
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, client.Do(ctx, "DEBUG", "SLEEP", "0.05").Err())
		}()
	}
	wg.Wait()
	ops := crossIdentityOps(t, 2, 1000, core.TokenBucket)[:2] // two round trips at once: both in flight
	out := make([]core.Result, len(ops))
	for range 2 { // the tight policy is used up
		require.NoError(t, s.Take(ctx, ops, out))
		require.True(t, out[0].Allowed)
	}
	lag := schedlag.Start(t)
	stalledGuard := uint64(0) // requests through the guard whose first round trip timed out
	for _, latency := range []time.Duration{0, slow} {
		proxy.SetLatency(latency)
		before := s.Stats().FailedCompensations
		stalled := 0 // requests whose first round trip timed out
		for i := 0; i-stalled < 8; i++ {
			require.Less(t, stalled, 8, "requests whose first round trip timed out (scheduling delay seen %s)", lag.Max())
			// The late replies of the refunds that timed out (due 3*latency
			// after the request began, 70ms after its timeout) arrive first:
			// the client waits for them on its connections (it ignores
			// context deadlines), so every connection is back in its pool.
			require.Eventually(t, func() bool {
				st := client.PoolStats()
				return st.IdleConns == st.TotalConns
			}, 5*time.Second, time.Millisecond, "replies still due")
			failedBefore, degradedBefore := s.Stats().FailedCompensations, g.Stats().Degraded
			var err error
			start := time.Now()
			viaGuard := i%2 == 1
			if viaGuard {
				err = g.Take(ctx, ops, out)
			} else {
				err = s.Take(ctx, ops, out)
			}
			took := time.Since(start)
			// Bounded by the timeout: one more timeout of slack (a goroutine
			// of a loaded machine can stall for that long unseen by the
			// probe, on another thread); a compensation given a deadline of
			// its own would succeed, and is caught by the count below.
			require.LessOrEqual(t, took, 2*timeout+lag.Max(), "bounded by the timeout (scheduling delay seen %s)", lag.Max())
			if s.Stats().FailedCompensations == failedBefore && (err != nil || g.Stats().Degraded != degradedBefore) {
				// Nothing to give back was counted: the first round trip
				// timed out, and nothing was decided.
				if viaGuard {
					require.NoError(t, err)
					require.Equal(t, core.FailedOpen, out[0].Source)
					stalledGuard++
				} else {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				stalled++
				t.Logf("latency %s request %d: the first round trip timed out after %s (scheduling delay seen %s): repeated", latency, i, took, lag.Max())
				continue
			}
			require.NoError(t, err, "latency %s request %d", latency, i)
			require.False(t, out[0].Allowed, "latency %s request %d: the tight policy denies: %+v", latency, i, out)
			require.Equal(t, core.FromStore, out[0].Source, "latency %s request %d: %+v", latency, i, out)
			require.True(t, out[1].Allowed, "latency %s request %d: the loose policy allowed by its own decision: %+v", latency, i, out)
		}
		failed := s.Stats().FailedCompensations - before
		if latency == 0 {
			require.Zero(t, failed)
		} else {
			require.Equal(t, uint64(8), failed, "the loose admission of every request could not be given back")
		}
	}
	require.Equal(t, stalledGuard, g.Stats().Degraded, "no decision was answered by the failure mode, but those of the requests that timed out before deciding")
}

func TestMain(m *testing.M) {
	if task, i, ok := redistest.Child(); ok {
		if err := child(task, i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// shared is the 3-master Cluster of the tests that leave its nodes as they
// found them and use keys of their own (redistest.SharedCluster); a test
// that kills or stalls a node, or reads what every test leaves on it
// (all the keys, commandstats), starts its own.
var shared = redistest.NewSharedCluster(3)

// child runs a task of a process started by redistest.StartProcesses.
func child(task string, _ int) error {
	if task != "groups" {
		return fmt.Errorf("unknown task %q", task)
	}
	// Two instances, each with its own client, 32 goroutines between them.
	var stores []*redisstore.Store
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: os.Getenv("SLUICE_GROUP_ADDR")})
		defer client.Close()
		// A generous timeout: the test counts admissions, not latency, and
		// three processes of 64 goroutines under -race on a loaded 2-core
		// machine can queue a call for seconds.
		s, err := redisstore.New(client, redisstore.WithTimeout(40*time.Second))
		if err != nil {
			return err
		}
		stores = append(stores, s)
	}
	a, err := strconv.Atoi(os.Getenv("SLUICE_GROUP_ALGO"))
	if err != nil {
		return err
	}
	ops := groupOps(os.Getenv("SLUICE_GROUP_ID"), 60, 70, core.Algorithm(a))
	run, err := hammer(stores, ops, 32, 3)
	if err != nil {
		return err
	}
	fmt.Printf("%d %d %d %d\n", run.admitted.Load(), run.phantom.Load(), run.unexplained.Load(), run.exhausted.Load())
	return nil
}

// The same hammering from three processes at once (two instances and 32
// goroutines each): exactly the tight capacity admitted across them, and no
// phantom denial.
func TestCrossIdentityGroupsFromProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, a := range []core.Algorithm{core.TokenBucket, core.SlidingWindowLog} {
		id := limitertest.Key(t).Identity
		outs := redistest.StartProcesses(t, 3, "groups", []string{
			"SLUICE_GROUP_ADDR=" + srv.Addr, "SLUICE_GROUP_ID=" + id, "SLUICE_GROUP_ALGO=" + strconv.Itoa(int(a)),
		}, 60*time.Second)
		var sum [4]int64
		for _, out := range outs {
			var v [4]int64
			_, err := fmt.Sscanf(out, "%d %d %d %d", &v[0], &v[1], &v[2], &v[3])
			require.NoError(t, err, "child output %q", out)
			for i := range v {
				sum[i] += v[i]
			}
		}
		require.Equal(t, [4]int64{60, 0, 0, 0}, sum, "%s: admitted, phantom denials, unexplained denials, allowed ops reported exhausted", a)
		s := newStore(t, srv.Client(t), redisstore.WithTimeout(10*time.Second)) // not about latency: this machine may stall
		for _, op := range groupOps(id, 60, 70, a)[1:] {
			r, err := limitertest.TakeOne(context.Background(), s, op.Key, op.Limit, 0)
			require.NoError(t, err)
			require.Equal(t, int64(10), r.Remaining, "%s: %q consumed exactly what was admitted", a, op.Key)
		}
	}
}

// Random cross-identity groups (two to four identities in different slots,
// all six algorithms, shadow ops, overrides, random costs, refunds of
// earlier admissions, made under overrides or not) through the memory
// store, a single node and a 3-master Cluster, one request at a time, the
// clock stepping forwards and backwards (within and across windows): the
// Cluster decides each identity apart, on the one instant of the group,
// and takes back exactly the admissions of a denied group, and all three
// report exactly the same Results at every step, warning levels included
// (each store names its overrides its own way: Result.Override is
// compared as set or not).
func TestClusterGroupsSameAnswersAsMemory(t *testing.T) {
	cluster := shared.Cluster(t)
	clusterClient := cluster.Client(t)
	single := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(31, 32))
	steps, backs, denied := 0, 0, 0
	for iter := range 40 {
		clock := limitertest.NewClock()
		mem, err := traceMemory(clock)
		require.NoError(t, err)
		stores := []core.Store{
			mem,
			newStore(t, single, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second)),
			newStore(t, clusterClient, redisstore.WithClock(clock.Now), redisstore.WithTimeout(10*time.Second)),
		}
		base := limitertest.Key(t).Identity
		type policy struct {
			key   core.Key
			limit core.Limit
		}
		var ps []policy
		for j := range 2 + rng.IntN(3) {
			a := limitertest.Algorithms[rng.IntN(6)]
			l := core.Per(1+rng.Int64N(8), time.Duration(100_000+rng.Int64N(2_000_000))*time.Microsecond).WithAlgorithm(a)
			ps = append(ps, policy{core.Key{Identity: fmt.Sprintf("%s-%d", base, j), Policy: fmt.Sprint("p", j)}, l})
		}
		var history []string
		admitted := map[int][][]core.Result{} // per policy, each admission as every store reported it
		var back time.Duration
		for step := range 80 {
			d := time.Duration(rng.Int64N(300_000)) * time.Microsecond
			switch rng.IntN(6) {
			case 0:
				d = -time.Duration(rng.Int64N(300_000)) * time.Microsecond // a small step back
			case 1:
				d = -time.Duration(rng.Int64N(4_000_000)) * time.Microsecond // back across windows
			}
			if back-d > 20*time.Minute { // Redis expires keys in real time (see limitertest.Clock)
				d = -d
			}
			if d < 0 {
				backs++
			}
			back -= d
			clock.Advance(d)
			if rng.IntN(8) == 0 {
				j := rng.IntN(len(ps))
				if as := admitted[j]; len(as) > 0 {
					adm := as[rng.IntN(len(as))]
					cost := 1 + rng.Int64N(2)
					for k, s := range stores {
						require.NoError(t, s.Refund(ctx, core.Admission{Key: ps[j].key, Limit: ps[j].limit, Cost: cost, At: adm[k].At, Override: adm[k].Override}))
					}
					history = append(history, fmt.Sprintf("at %d refund %q %d of %+v", clock.Now().UnixMicro(), ps[j].key, cost, adm[0]))
					continue
				}
			}
			if rng.IntN(12) == 0 { // an override: a raise, or a block
				p := ps[rng.IntN(len(ps))]
				o := core.Override{Until: clock.Now().Add(time.Duration(1+rng.Int64N(800_000)) * time.Microsecond)}
				if rng.IntN(2) == 0 {
					o.Limit = core.Per(1+rng.Int64N(8), p.limit.Period).WithAlgorithm(p.limit.Algorithm)
				}
				for _, s := range stores {
					require.NoError(t, s.SetOverride(ctx, p.key, o))
				}
				history = append(history, fmt.Sprintf("at %d override %q %+v", clock.Now().UnixMicro(), p.key, o))
				continue
			}
			ops := make([]core.Op, len(ps))
			for i, p := range ps {
				ops[i] = core.Op{Key: p.key, Limit: p.limit, Cost: rng.Int64N(3), Shadow: rng.IntN(5) == 0}
			}
			res := make([][]core.Result, len(stores))
			for k, s := range stores {
				res[k] = make([]core.Result, len(ops))
				require.NoError(t, s.Take(ctx, ops, res[k]), "store %d", k)
			}
			steps++
			history = append(history, fmt.Sprintf("at %d ops %+v\n    -> %+v", clock.Now().UnixMicro(), ops, res[0]))
			groupDenied := false
			for i, op := range ops {
				if op.Cost > 0 && res[0][i].Allowed {
					adm := make([]core.Result, len(stores))
					for k := range stores {
						adm[k] = res[k][i]
					}
					admitted[i] = append(admitted[i], adm)
				}
				groupDenied = groupDenied || !res[0][i].Allowed && op.Cost > 0 && !op.Shadow
				named := res[0][i].Override != 0
				for k := range stores {
					require.Equal(t, named, res[k][i].Override != 0, "iter %d step %d op %d store %d: an override named: %+v %+v\n%s", iter, step, i, k, res[0][i], res[k][i], strings.Join(history[max(0, len(history)-6):], "\n"))
					res[k][i].Override = 0
				}
			}
			if groupDenied {
				denied++
			}
			for k, name := range []string{"", "single node", "cluster"}[1:] {
				if !assert.Equal(t, res[0], res[k+1], "iter %d step %d: memory and %s", iter, step, name) {
					t.Fatalf("history:\n%s", strings.Join(history[max(0, len(history)-12):], "\n"))
				}
			}
		}
		mem.Close()
	}
	t.Logf("%d groups compared on three stores (%d denied), %d clock steps back", steps, denied, backs)
}
