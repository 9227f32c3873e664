package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

func idemReq(id, key, method, path string) keyfunc.Static {
	h := map[string][]string{"U": {id}}
	if key != "" {
		h["Idempotency-Key"] = []string{key}
	}
	return keyfunc.Static{Headers: h, MethodName: method, PathName: path, RouteName: path}
}

var idem = core.WithIdempotency(core.Idempotency{Header: "Idempotency-Key", TTL: time.Minute, MaxRepeats: 3})

// 64 concurrent repeats of one request pass at most
// MaxRepeats+1 times, the first one counted.
func TestIdempotencyConcurrentRepeats(t *testing.T) {
	s, _ := frozen(t)
	testConcurrentRepeats(t, s)
}

func testConcurrentRepeats(t *testing.T, s core.Store) {
	t.Helper()
	name := fmt.Sprint("hourly-", time.Now().UnixNano())
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: name, Key: keyfunc.Header("U"), Limit: core.PerHour(1)},
		{Name: name + "-ip", Key: keyfunc.Const("ip"), Limit: core.PerHour(1000)},
	}, idem)
	require.NoError(t, err)
	burst := func(user string) (admitted, repeats int64) {
		var a, r atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := l.Check(context.Background(), idemReq(user, "k1", "POST", "/pay"))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					a.Add(1)
				}
				if d.Repeat {
					r.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		return a.Load(), r.Load()
	}
	// The original is among the 64.
	admitted, repeats := burst("alice")
	require.Equal(t, int64(4), admitted, "the original and MaxRepeats repeats")
	require.Equal(t, int64(3), repeats)
	// The original passed before: 64 concurrent repeats.
	d, err := l.Check(context.Background(), idemReq("bob", "k1", "POST", "/pay"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	admitted, repeats = burst("bob")
	require.Equal(t, int64(3), admitted, "MaxRepeats repeats, not 64")
	require.Equal(t, int64(3), repeats)
	// The originals were counted: the hourly quotas are spent.
	for _, u := range []string{"alice", "bob"} {
		d, err := l.Check(context.Background(), idemReq(u, "", "POST", "/pay"))
		require.NoError(t, err)
		require.False(t, d.Allowed, u)
	}
}

// A key admitted on a cheap route does not pass a throttled
// route, another method or a higher cost uncounted.
func TestIdempotencyIsBoundToTheRequest(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "per-user", Key: keyfunc.Header("U"), Limit: core.PerHour(10000)},
		{Name: "expensive", Key: keyfunc.Header("U"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/expensive"}}},
	}, idem)
	require.NoError(t, err)
	ctx := context.Background()
	ran := 0
	for i := range 20 {
		k := fmt.Sprint("k", i)
		d, err := l.Check(ctx, idemReq("mallory", k, "GET", "/cheap"))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		for range 5 {
			d, err := l.Check(ctx, idemReq("mallory", k, "GET", "/expensive"))
			require.NoError(t, err)
			if d.Allowed {
				ran++
			}
		}
	}
	require.Equal(t, 4, ran, "one counted /expensive request and its 3 repeats, not 100")

	// Method and cost are part of the request.
	l2, err := core.NewLimiter(s, []core.Policy{{Name: "writes", Key: keyfunc.Header("U"), Limit: core.PerHour(2)}}, idem)
	require.NoError(t, err)
	allowed := func(method string, cost int64) bool {
		d, err := l2.CheckWith(ctx, idemReq("bob", "same", method, "/x"), core.Call{Cost: cost})
		require.NoError(t, err)
		return d.Allowed
	}
	require.True(t, allowed("POST", 1))
	require.True(t, allowed("POST", 1), "a repeat")
	require.True(t, allowed("PUT", 1), "another method: counted, and the quota has room")
	require.False(t, allowed("DELETE", 1), "another method: counted, the quota is spent")
	require.False(t, allowed("POST", 2), "a higher cost: counted")
	require.True(t, allowed("POST", 1), "the same request again: still a repeat")
}

// Record keys cannot collide, NUL bytes included.
func TestIdempotencyRecordsDoNotCollide(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(1)}}, idem)
	require.NoError(t, err)
	ctx := context.Background()
	// y spends its quota.
	d, err := l.Check(ctx, idemReq("y", "", "GET", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// "x\x00y" is admitted with key "v".
	d, err = l.Check(ctx, idemReq("x\x00y", "v", "GET", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// y with key "v\x00x" is not that request.
	for _, k := range []string{"v\x00x", "v\x00x\x00y", "v\x00"} {
		d, err = l.Check(ctx, idemReq("y", k, "GET", "/"))
		require.NoError(t, err)
		require.False(t, d.Allowed, "%q", k)
		require.False(t, d.Repeat)
	}
	// The record is not a policy's key: an identity shaped like one is counted.
	d, err = l.Check(ctx, idemReq("x\x00y\x00idem/", "", "GET", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

// A first attempt that is denied leaves no record behind: its retries are
// counted (and denied) like it.
func TestIdempotencyDeniedOriginalLeavesNoRecord(t *testing.T) {
	s, at := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(1).WithAlgorithm(core.FixedWindow)}}, idem)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.Check(ctx, idemReq("carol", "", "GET", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	for range 5 {
		d, err := l.Check(ctx, idemReq("carol", "retry", "GET", "/"))
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.False(t, d.Repeat)
	}
	*at = time.Hour // a new window: the original passes, then its repeats
	for i := range 5 {
		d, err := l.Check(ctx, idemReq("carol", "retry", "GET", "/"))
		require.NoError(t, err)
		require.Equal(t, i < 4, d.Allowed, i)
		require.Equal(t, i > 0 && i < 4, d.Repeat, i)
	}
}

// A refunded original gives its record back: its retry is counted.
func TestIdempotencyRefundedOriginal(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(5), Refund: core.RefundFailed}}, idem)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.Check(ctx, idemReq("dan", "k", "POST", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, l.Refund(ctx, &d, 503))
	d, err = l.Check(ctx, idemReq("dan", "k", "POST", "/"))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.False(t, d.Repeat, "the original was not counted: the retry is")
	require.Equal(t, int64(4), d.Results[0].Remaining)
}

func TestIdempotencySettingsAreValidated(t *testing.T) {
	s, _ := frozen(t)
	ps := []core.Policy{{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(1)}}
	cases := []struct {
		i    core.Idempotency
		want string
	}{
		{core.Idempotency{TTL: 300}, "TTL"},
		{core.Idempotency{TTL: 999 * time.Millisecond}, "TTL"},
		{core.Idempotency{TTL: time.Second + 1}, "TTL"},
		{core.Idempotency{TTL: -time.Second}, "TTL"},
		{core.Idempotency{MaxRepeats: 100000}, "MaxRepeats"},
		{core.Idempotency{MaxRepeats: -1}, "MaxRepeats"},
		{core.Idempotency{Header: "Idempotency Key"}, "Header"},
		{core.Idempotency{Header: "a:b"}, "Header"},
		{core.Idempotency{Header: "é"}, "Header"},
	}
	for _, c := range cases {
		_, err := core.NewLimiter(s, ps, core.WithIdempotency(c.i))
		require.ErrorContains(t, err, "WithIdempotency: "+c.want, "%+v", c.i)
	}
	_, err := core.NewLimiter(s, ps, core.WithIdempotency(core.Idempotency{Header: "Idempotency-Key", TTL: 24 * time.Hour, MaxRepeats: 1000}))
	require.NoError(t, err)
}

// Property: under random concurrent traffic, a request passes uncounted only
// as a repeat of an admitted original of exactly the same request, at most
// MaxRepeats times; every other admission is counted within each policy's
// capacity.
func TestIdempotencyProperty(t *testing.T) {
	s, _ := frozen(t)
	const capacity = 5
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "user", Key: keyfunc.Header("U"), Limit: core.PerHour(capacity)},
		{Name: "writes", Key: keyfunc.Header("U"), Limit: core.PerHour(capacity), Match: core.Match{Methods: []string{"POST"}}},
		{Name: "admin", Key: keyfunc.Header("A"), Limit: core.PerHour(capacity), Match: core.Match{Routes: []string{"/admin/**"}}},
	}, idem)
	require.NoError(t, err)
	type sig struct {
		u, a, key, method, path string
		cost                    int64
	}
	type outcome struct {
		s            sig
		allowed, rep bool
	}
	var mu sync.Mutex
	var log []outcome
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 200 {
				sg := sig{u: fmt.Sprint("u", rng.IntN(3)), a: []string{"", "a0", "a\x00b"}[rng.IntN(3)], key: []string{"", "k0", "k1", "k\x00"}[rng.IntN(4)],
					method: []string{"GET", "POST"}[rng.IntN(2)], path: []string{"/x", "/admin/x", "/admin/y"}[rng.IntN(3)], cost: 1 + rng.Int64N(2)}
				r := idemReq(sg.u, sg.key, sg.method, sg.path)
				if sg.a != "" {
					r.Headers["A"] = []string{sg.a}
				}
				if sg.path == "/x" { // no policy reads A: not part of the request
					sg.a = ""
				}
				d, err := l.CheckWith(context.Background(), r, core.Call{Cost: sg.cost})
				if err != nil {
					t.Error(err)
					return
				}
				o := outcome{s: sg, allowed: d.Allowed, rep: d.Repeat}
				mu.Lock()
				log = append(log, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	originals := map[sig]int{}
	repeats := map[sig]int{}
	used := map[string]int64{}
	for _, o := range log {
		switch {
		case o.rep:
			require.True(t, o.allowed)
			require.NotEmpty(t, o.s.key)
			repeats[o.s]++
		case o.allowed:
			originals[o.s]++
			used["user/"+o.s.u] += o.s.cost
			if o.s.method == "POST" {
				used["writes/"+o.s.u] += o.s.cost
			}
			if o.s.a != "" && o.s.path != "/x" {
				used["admin/"+o.s.a] += o.s.cost
			}
		}
	}
	for s, n := range repeats {
		require.Positive(t, originals[s], "a repeat without an admitted original: %+v", s)
		require.LessOrEqual(t, n, 3, "%+v", s)
	}
	for k, n := range used {
		require.LessOrEqual(t, n, int64(capacity), "%s counted past its capacity: uncounted admissions", k)
	}
}
