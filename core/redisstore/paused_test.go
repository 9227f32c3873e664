//go:build unix && go1.25

package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/pipeline"
	"github.com/sluicehq/sluice/internal/redistest"
)

// pausedLimit is the limit of each key of the paused-server tests: each key
// is taken once, so its remaining units tell whether that decision ran on
// Redis (9) or not (10), and a decision run twice shows as 8.
var pausedLimit = core.PerHour(10)

// While redis-server is paused (SIGSTOP: its connections hang, none
// closes) with a decision in flight, decisions queue behind it; callers
// leave at random instants before and after the server resumes (SIGCONT),
// some contexts end by their own deadline, and in one round the store is
// closed while they are queued. Every decision whose caller left before the
// server resumed (so before a pipeline could be formed behind the one in
// flight) is never run: its key is untouched; every decision reported
// made was run exactly once; one that failed later ran at most once; and
// once idle for SenderIdle the store holds no goroutine.
func TestPausedServerRunsNoAbandonedDecision(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			testPausedServer(t, honours)
		})
	}
}

func testPausedServer(t *testing.T, honours bool) {
	srv := redistest.StartServer(t)
	client := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled, o.PoolSize = honours, 8 })
	trips := &tripCounter{}
	client.AddHook(trips)
	s, err := redisstore.New(client, redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	direct := srv.Client(t)
	base := limitertest.Key(t).Identity
	_, err = takeID(context.Background(), s, base+"-warm", pausedLimit, 1) // loads the library
	require.NoError(t, err)
	goroutines := runtime.NumGoroutine()
	pid := srv.Pid()
	require.NotZero(t, pid)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	admitted, left := 0, 0
	for round := range 4 {
		a, l := pausedRound(t, s, trips, direct, pid, rng, fmt.Sprintf("%s-r%d", base, round), round == 3)
		admitted, left = admitted+a, left+l
	}
	require.Positive(t, admitted)
	require.Positive(t, left, "no caller left while its decision was queued: nothing was tried")
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines }, 3*pipeline.DefaultSenderIdle, 10*time.Millisecond,
		"the store's senders exit once idle (%d goroutines, %d before)", runtime.NumGoroutine(), goroutines)
}

// pausedRound pauses the server behind one decision in flight, queues n
// more, ends some callers' contexts before and after resuming it, and
// checks each key; it returns how many decisions were reported made, and
// how many callers left while theirs was queued.
func pausedRound(t *testing.T, s *redisstore.Store, trips *tripCounter, direct *redis.Client, pid int, rng *rand.Rand, prefix string, closeQueued bool) (admitted, left int) {
	const n = 24
	fcallsBefore := redistest.CommandCalls(t, direct, "fcall")
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	before := trips.n.Load()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := takeID(context.Background(), s, prefix+"-first", pausedLimit, 1)
		require.NoError(t, err)
	})
	require.Eventually(t, func() bool { return trips.n.Load() == before+1 }, 5*time.Second, time.Millisecond, "the first decision is written")
	type outcome struct {
		mu       sync.Mutex
		left     time.Time // when its caller's context was cancelled (after)
		deadline bool      // its context has a deadline of its own
		err      error
	}
	outs := make([]outcome, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		if rng.IntN(4) == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Millisecond)
			outs[i].deadline = true
		}
		cancels[i] = cancel
		wg.Go(func() {
			_, err := takeID(ctx, s, fmt.Sprintf("%s-%d", prefix, i), pausedLimit, 1)
			outs[i].mu.Lock()
			outs[i].err = err
			outs[i].mu.Unlock()
		})
	}
	require.Eventually(t, func() bool { return redisstore.QueuedCalls(s) >= n/2 }, 5*time.Second, time.Millisecond)
	if closeQueued {
		require.NoError(t, s.Close())
	}
	// Callers leave at random instants over 150ms; the server resumes
	// halfway.
	leave := func(i int) {
		cancels[i]()
		outs[i].mu.Lock()
		outs[i].left = time.Now()
		outs[i].mu.Unlock()
	}
	order := rng.Perm(n)
	var resumed time.Time
	for j, i := range order {
		if j == n/2 {
			resumed = time.Now()
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
		}
		if rng.IntN(3) == 0 {
			leave(i)
		}
		time.Sleep(time.Duration(rng.IntN(12)) * time.Millisecond)
	}
	wg.Wait()
	if closeQueued {
		_, err := takeID(context.Background(), s, prefix+"-closed", pausedLimit, 1)
		require.ErrorIs(t, err, core.ErrClosed)
	}
	fcalls := redistest.CommandCalls(t, direct, "fcall") - fcallsBefore
	admitted, ran := 1, 1                                          // the first
	reader := newStore(t, direct, redisstore.WithPipelining(0, 0)) // reads the keys, unpipelined
	for i := range n {
		o := &outs[i]
		r, err := direct.Exists(context.Background(), s.Key(keyOf(fmt.Sprintf("%s-%d", prefix, i)), pausedLimit.Algorithm)).Result()
		require.NoError(t, err)
		runs := 0
		if r == 1 {
			res, err := takeID(context.Background(), reader, fmt.Sprintf("%s-%d", prefix, i), pausedLimit, 0)
			require.NoError(t, err)
			runs = int(pausedLimit.Rate - res.Remaining)
		}
		ran += runs
		switch {
		case !o.left.IsZero() && o.left.Before(resumed):
			left++
			require.Error(t, o.err, "call %d: its caller left while it was queued", i)
			require.Zero(t, runs, "call %d: its caller left while it was queued (before the server resumed), and it ran (%v)", i, o.err)
		case o.err == nil:
			admitted++
			require.Equal(t, 1, runs, "call %d was reported made", i)
		default:
			require.LessOrEqual(t, runs, 1, "call %d failed: %v", i, o.err)
		}
		cancels[i]()
	}
	// The decisions that ran went in FCALLs (the queued ones together, as
	// one decideMany): one at least, one per decision at most.
	require.GreaterOrEqual(t, fcalls, 1)
	require.LessOrEqual(t, fcalls, ran, "FCALLs run for %d decisions run", ran)
	return admitted, left
}
