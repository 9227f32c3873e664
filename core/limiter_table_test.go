package core_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// The Limiter's own behaviour, through its public API on the memory store
// with a frozen clock: which policies a request matches, tiers, shadow
// policies and their hooks, refunds, overrides, resets and the admin calls.
// A policy's capacity is read from PolicyResult.Limit (the limit applied:
// the policy's, its tier's or an override's), and checked by counting
// admissions.

// names returns the policy names of d's results, in order.
func names(d core.Decision) []string {
	out := make([]string, 0, len(d.Results))
	for _, p := range d.Results {
		out = append(out, p.Policy)
	}
	return out
}

func TestMatchTable(t *testing.T) {
	s, _ := frozen(t)
	k := keyfunc.Const("k")
	lim := core.PerHour(1000)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "all", Key: k, Limit: lim},
		{Name: "api-rest", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/api/**"}}},
		{Name: "user-id", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/users/:id"}}},
		{Name: "user-brace", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/users/{id}/posts"}}},
		{Name: "star", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/files/*/raw"}}},
		{Name: "login-post", Key: k, Limit: lim, Match: core.Match{Methods: []string{"POST"}, Routes: []string{"/login"}}},
		{Name: "writes", Key: k, Limit: lim, Match: core.Match{Methods: []string{"PUT", "DELETE"}}},
		{Name: "any-method", Key: k, Limit: lim, Match: core.Match{Methods: []string{"*"}, Routes: []string{"/any"}}},
		{Name: "literal", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/users/me"}}},
		{Name: "grpc", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/pkg.Svc/Call"}}},
		{Name: "two", Key: k, Limit: lim, Match: core.Match{Routes: []string{"/a", "/b/**"}}},
	})
	require.NoError(t, err)
	cases := []struct {
		method, path string
		want         []string
	}{
		{"GET", "/", []string{"all"}},
		{"GET", "/api", []string{"all", "api-rest"}},
		{"GET", "/api/", []string{"all", "api-rest"}},
		{"GET", "/api/v1/things/7", []string{"all", "api-rest"}},
		{"GET", "/apix", []string{"all"}},
		{"GET", "/users/42", []string{"all", "user-id"}},
		{"GET", "/users/42/", []string{"all", "user-id"}}, // a trailing slash is no segment
		{"GET", "/users", []string{"all"}},
		{"GET", "/users/me", []string{"all", "user-id", "literal"}},
		{"GET", "/users/42/posts", []string{"all", "user-brace"}},
		{"GET", "/users//posts", []string{"all"}},
		{"GET", "/files/a.txt/raw", []string{"all", "star"}},
		{"GET", "/files/raw", []string{"all"}},
		{"POST", "/login", []string{"all", "login-post"}},
		{"post", "/login", []string{"all", "login-post"}},
		{"GET", "/login", []string{"all"}},
		{"PUT", "/x", []string{"all", "writes"}},
		{"DELETE", "/users/1", []string{"all", "user-id", "writes"}},
		{"PATCH", "/any", []string{"all", "any-method"}},
		{"POST", "/pkg.Svc/Call", []string{"all", "grpc"}},
		{"GET", "/a", []string{"all", "two"}},
		{"GET", "/a/b", []string{"all"}},
		{"GET", "/b", []string{"all", "two"}},
		{"GET", "/b/c/d", []string{"all", "two"}},
	}
	ctx := context.Background()
	for _, c := range cases {
		r := keyfunc.Static{MethodName: c.method, PathName: c.path}
		d, err := l.Check(ctx, r)
		require.NoError(t, err, "%s %s", c.method, c.path)
		require.Equal(t, c.want, names(d), "%s %s", c.method, c.path)
		p, err := l.Peek(ctx, r)
		require.NoError(t, err)
		require.Equal(t, c.want, names(p), "Peek %s %s matches what Check matches", c.method, c.path)
	}
}

func TestMatchRejectsBadPatterns(t *testing.T) {
	s, _ := frozen(t)
	cases := []struct {
		routes  []string
		methods []string
		want    string
	}{
		{routes: []string{"api"}, want: "must start with /"},
		{routes: []string{"/a//b"}, want: "empty segment"},
		{routes: []string{"/a/**/b"}, want: "** must be the last segment"},
		{routes: []string{"/a/b*"}, want: "* must be a whole segment"},
		{routes: []string{"/ok", "/x*y"}, want: "* must be a whole segment"},
		{methods: []string{"GET POST"}, want: "Methods"},
	}
	for _, c := range cases {
		_, err := core.NewLimiter(s, []core.Policy{{
			Name: "p", Key: keyfunc.Const("k"), Limit: core.PerSecond(1),
			Match: core.Match{Routes: c.routes, Methods: c.methods},
		}})
		require.ErrorContains(t, err, c.want, "%v %v", c.routes, c.methods)
		require.ErrorContains(t, err, `policy "p"`)
	}
}

// A request no policy matches is not limited: it is allowed, with no
// results, and costs nothing.
func TestNoPolicyMatches(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "api", Key: keyfunc.Const("k"), Limit: core.PerHour(1), Match: core.Match{Routes: []string{"/api/**"}}},
	})
	require.NoError(t, err)
	for range 3 {
		d, err := l.Check(context.Background(), keyfunc.Static{MethodName: "GET", PathName: "/health"})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.False(t, d.Limited())
		require.Empty(t, d.Results)
		require.Equal(t, core.PolicyResult{}, d.Bound())
	}
}

// More than 64 policies: the index list no longer fits the preallocated one.
func TestManyPolicies(t *testing.T) {
	s, _ := frozen(t)
	var ps []core.Policy
	for i := range 70 {
		ps = append(ps, core.Policy{Name: fmt.Sprint("p", i), Key: keyfunc.Const("k"), Limit: core.PerHour(int64(i + 2))})
	}
	l, err := core.NewLimiter(s, ps)
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		d, err := l.Check(ctx, keyfunc.Static{})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Len(t, d.Results, 70)
	}
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.False(t, d.Allowed, "p0 allows 2 an hour")
	require.Equal(t, "p0", d.Bound().Policy)
	require.Equal(t, int64(1), d.Results[1].Remaining, "p1 (3 an hour) was not charged for the denied request")
}

func TestTiersTable(t *testing.T) {
	s, _ := frozen(t)
	var resolves atomic.Int64
	tiering := core.Tiering{
		Key: keyfunc.Header("X-Key"),
		Resolve: func(_ context.Context, id string) (string, error) {
			resolves.Add(1)
			switch id {
			case "gold":
				return "premium", nil
			case "broken":
				return "", errors.New("directory down")
			case "panics":
				panic("resolver bug")
			case "nobody":
				return "", nil
			}
			return id, nil // "free", "enterprise", "unknown"
		},
	}
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "api", Key: keyfunc.Header("X-Key"), Limit: core.PerHour(2), Tiers: map[string]core.Limit{
			"free":       core.PerHour(1),
			"premium":    core.PerHour(5),
			"enterprise": core.PerHour(8),
		}},
		{Name: "flat", Key: keyfunc.Header("X-Key"), Limit: core.PerHour(100)},
	}, core.WithTiering(tiering))
	require.NoError(t, err)
	cases := []struct {
		key      string
		tier     string
		capacity int64
	}{
		{"free", "free", 1},
		{"gold", "premium", 5},
		{"enterprise", "enterprise", 8},
		{"unknown", "unknown", 2}, // a tier the policy does not list: its Limit
		{"nobody", "", 2},
		{"broken", "", 2}, // a resolver error: the default Limit
		{"panics", "", 2}, // a resolver panic is an error, not a crash
	}
	ctx := context.Background()
	for _, c := range cases {
		r := keyfunc.Static{Headers: map[string][]string{"X-Key": {c.key}}}
		admitted := int64(0)
		for range 10 {
			d, err := l.Check(ctx, r)
			require.NoError(t, err, c.key)
			require.Equal(t, c.tier, d.Results[0].Tier, c.key)
			require.Equal(t, "", d.Results[1].Tier, "a policy without tiers has no tier")
			require.Equal(t, c.capacity, d.Results[0].Limit.Capacity(), c.key)
			if d.Allowed {
				admitted++
			}
		}
		require.Equal(t, c.capacity, admitted, "%s: the tier's limit is the one enforced", c.key)
	}
	// Successful resolutions are cached (TTL 1 minute by default): one call
	// per caller, not per request; failures are asked again.
	before := resolves.Load()
	for _, key := range []string{"free", "gold", "enterprise", "unknown", "nobody"} {
		_, err := l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"X-Key": {key}}})
		require.NoError(t, err)
	}
	require.Equal(t, before, resolves.Load())
	_, err = l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"X-Key": {"broken"}}})
	require.NoError(t, err)
	require.Equal(t, before+1, resolves.Load())

	// No tier key: the policy's own Limit, and the resolver is not asked.
	// (api and flat are keyed by the same header, so key them by IP here.)
	l2, err := core.NewLimiter(s, []core.Policy{
		{Name: "api2", Key: keyfunc.Const("c"), Limit: core.PerHour(3), Tiers: map[string]core.Limit{"free": core.PerHour(1)}},
	}, core.WithTiering(tiering))
	require.NoError(t, err)
	before = resolves.Load()
	d, err := l2.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, "", d.Results[0].Tier)
	require.Equal(t, int64(3), d.Results[0].Limit.Capacity())
	require.Equal(t, before, resolves.Load())
}

// The tier cache stays within MaxEntries and still answers correctly after
// evicting.
func TestTierCacheIsBounded(t *testing.T) {
	s, _ := frozen(t)
	var resolves atomic.Int64
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "api", Key: keyfunc.Header("K"), Limit: core.PerHour(1), Tiers: map[string]core.Limit{"big": core.PerHour(50)}},
	}, core.WithTiering(core.Tiering{
		Key:        keyfunc.Header("K"),
		MaxEntries: 16,
		TTL:        time.Hour,
		Resolve: func(_ context.Context, id string) (string, error) {
			resolves.Add(1)
			return "big", nil
		},
	}))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 200 {
		d, err := l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"K": {fmt.Sprint("u", i)}}})
		require.NoError(t, err)
		require.Equal(t, "big", d.Results[0].Tier)
		require.Equal(t, int64(49), d.Results[0].Remaining)
	}
	require.Equal(t, int64(200), resolves.Load())
	// The most recent caller is still cached.
	_, err = l.Check(ctx, keyfunc.Static{Headers: map[string][]string{"K": {"u199"}}})
	require.NoError(t, err)
	require.Equal(t, int64(200), resolves.Load())
}

func TestTiersNeedTiering(t *testing.T) {
	s, _ := frozen(t)
	// Tiers without WithTiering are never used: the policy's Limit applies.
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "api", Key: keyfunc.Const("k"), Limit: core.PerHour(2), Tiers: map[string]core.Limit{"free": core.PerHour(1)}},
	})
	if err != nil {
		require.ErrorContains(t, err, "Tier")
		return
	}
	d, err := l.Check(context.Background(), keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, int64(2), d.Results[0].Limit.Capacity())
}

// Shadow policies are evaluated, reported and hooked, but never deny.
func TestShadowTable(t *testing.T) {
	cases := []struct {
		name       string
		shadowAll  bool
		shadowHard bool
		wantAllow  []bool // per request, 4 requests
		wantShadow []int  // OnShadowDeny calls after each request
	}{
		{"strict policy denies", false, false, []bool{true, true, false, false}, []int{0, 0, 0, 0}},
		{"policy on trial", false, true, []bool{true, true, true, true}, []int{0, 0, 1, 2}},
		{"limiter on trial", true, false, []bool{true, true, true, true}, []int{0, 0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := frozen(t)
			var shadowed []string
			opts := []core.LimiterOption{core.OnShadowDeny(func(_ context.Context, _ keyfunc.Request, p core.PolicyResult) {
				require.True(t, p.Shadow)
				require.False(t, p.Allowed)
				require.True(t, p.ShadowDenied())
				shadowed = append(shadowed, p.Policy)
			})}
			if c.shadowAll {
				opts = append(opts, core.WithShadow())
			}
			l, err := core.NewLimiter(s, []core.Policy{
				{Name: "wide", Key: keyfunc.Const("k"), Limit: core.PerHour(100)},
				{Name: "tight", Key: keyfunc.Const("k"), Limit: core.PerHour(2), Shadow: c.shadowHard},
			}, opts...)
			require.NoError(t, err)
			for i, want := range c.wantAllow {
				d, err := l.Check(context.Background(), keyfunc.Static{})
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed, "request %d", i)
				require.Len(t, shadowed, c.wantShadow[i], "request %d", i)
				tight := d.Results[1]
				if i >= 2 {
					require.False(t, tight.Allowed, "the tight policy would deny request %d", i)
					if tight.Shadow {
						require.Equal(t, core.OutcomeShadowDenied, d.Outcome(1))
						require.True(t, d.Allowed)
					} else {
						require.Equal(t, core.OutcomeDenied, d.Outcome(1))
						require.Equal(t, "tight", d.Bound().Policy)
					}
				}
				// A shadow denial never charges the other policies less: the
				// wide policy counted every admitted request.
				admitted := int64(0)
				for _, a := range c.wantAllow[:i+1] {
					if a {
						admitted++
					}
				}
				require.Equal(t, 100-admitted, d.Results[0].Remaining, "request %d", i)
			}
		})
	}
}

// OnStateChange and OnWarning fire on the transitions the store reports,
// once each, in order.
func TestStateHooks(t *testing.T) {
	s, at := frozen(t)
	type event struct {
		hook       string
		prev, next core.State
	}
	var events []event
	rec := func(name string) core.Hook {
		return func(ctx context.Context, r keyfunc.Request, p core.PolicyResult) {
			require.NotNil(t, ctx)
			require.NotNil(t, r)
			require.Equal(t, "p", p.Policy)
			events = append(events, event{name, p.Previous, p.State})
		}
	}
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerMinute(10).WithAlgorithm(core.FixedWindow)},
	}, core.OnStateChange(rec("change")), core.OnWarning(rec("warn")))
	require.NoError(t, err)
	ctx := context.Background()
	var outcomes []core.Outcome
	for range 11 {
		d, err := l.Check(ctx, keyfunc.Static{})
		require.NoError(t, err)
		outcomes = append(outcomes, d.Outcome(0))
		require.Equal(t, d.Results[0].State, d.State())
	}
	// Usage above 80% (the 9th request) enters Warning; the 11th is denied.
	require.Equal(t, []event{
		{"change", core.Normal, core.Warning},
		{"warn", core.Normal, core.Warning},
		{"change", core.Warning, core.Throttled},
	}, events)
	require.Equal(t, core.OutcomeAllowed, outcomes[0])
	require.Equal(t, core.OutcomeAllowed, outcomes[7])
	require.Equal(t, core.OutcomeWarning, outcomes[8])
	require.Equal(t, core.OutcomeWarning, outcomes[9])
	require.Equal(t, core.OutcomeDenied, outcomes[10])

	// A new window: the key is fresh again, and a fresh key is Normal
	// (no transition is reported from a state that no longer exists).
	events = nil
	*at += time.Minute
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, core.Normal, d.Results[0].State)
	require.Equal(t, core.Normal, d.Results[0].Previous)
	require.Empty(t, events)

	// A token bucket keeps its state: Throttled leaves for Warning (usage
	// still high) at the next admission, then for Normal as it drains.
	events = nil
	l, err = core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Const("tb"), Limit: core.PerMinute(10)},
	}, core.OnStateChange(rec("change")), core.OnWarning(rec("warn")))
	require.NoError(t, err)
	for range 11 {
		_, err := l.Check(ctx, keyfunc.Static{})
		require.NoError(t, err)
	}
	*at += 6 * time.Second // one token back
	d, err = l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	*at += 30 * time.Second // five back: usage 6 of 10 after this one
	d, err = l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, []event{
		{"change", core.Normal, core.Warning},
		{"warn", core.Normal, core.Warning},
		{"change", core.Warning, core.Throttled},
		{"change", core.Throttled, core.Warning},
		{"warn", core.Throttled, core.Warning},
		{"change", core.Warning, core.Normal},
	}, events)
	// No transition, no hook.
	events = nil
	_, err = l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.Empty(t, events)
}

// Refund gives back exactly the policies whose RefundWhen matches the status.
func TestRefundTable(t *testing.T) {
	cases := []struct {
		when   core.RefundWhen
		status int
		back   bool
	}{
		{core.RefundNever, 200, false},
		{core.RefundNever, 500, false},
		{core.RefundFailed, 200, false},
		{core.RefundFailed, 399, false},
		{core.RefundFailed, 400, true},
		{core.RefundFailed, 503, true},
		{core.RefundSuccessful, 200, true},
		{core.RefundSuccessful, 302, true},
		{core.RefundSuccessful, 404, false},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%d/%d", c.when, c.status)
		s, _ := frozen(t)
		l, err := core.NewLimiter(s, []core.Policy{
			{Name: "counted", Key: keyfunc.Const("k"), Limit: core.PerHour(10)},
			{Name: "refunded", Key: keyfunc.Const("k"), Limit: core.PerHour(10), Refund: c.when},
		})
		require.NoError(t, err)
		ctx := context.Background()
		d, err := l.CheckWith(ctx, keyfunc.Static{}, core.Call{Cost: 3})
		require.NoError(t, err)
		require.Equal(t, c.when != core.RefundNever, d.Refundable(), name)
		require.NoError(t, l.Refund(ctx, &d, c.status), name)
		require.NoError(t, l.Refund(ctx, &d, c.status), "%s: a second Refund gives nothing more", name)
		p, err := l.Peek(ctx, keyfunc.Static{})
		require.NoError(t, err)
		require.Equal(t, int64(7), p.Results[0].Remaining, "%s: a policy that does not refund keeps the count", name)
		want := int64(7)
		if c.back {
			want = 10
		}
		require.Equal(t, want, p.Results[1].Remaining, name)
		require.Equal(t, c.when != core.RefundNever && !c.back, d.Refundable(), "%s: a refunded admission is not refundable again", name)
	}
}

// A denied request consumed nothing, so there is nothing to refund.
func TestRefundOfDeniedRequest(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(1), Refund: core.RefundFailed},
	})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	denied, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.False(t, denied.Allowed)
	require.NoError(t, l.Refund(ctx, &denied, 500))
	p, err := l.Peek(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, int64(0), p.Results[0].Remaining, "refunding the denial gave nothing back")
	require.NoError(t, l.Refund(ctx, &d, 500))
	p, err = l.Peek(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Results[0].Remaining)
}

// ownStore is a Store of one's own: here the memory store seen through
// core.Store alone, as a third-party store is.
type ownStore struct{ core.Store }

// A Store of one's own gets everything the Limiter does, since the one
// contract holds it all: a request denied by one policy consumes nothing
// from the others, refunds, overrides, idempotency and Reset work.
func TestStoreOfOnesOwn(t *testing.T) {
	ms, _ := frozen(t)
	l, err := core.NewLimiter(ownStore{ms}, []core.Policy{
		{Name: "a", Key: keyfunc.Const("k"), Limit: core.PerHour(5)},
		{Name: "b", Key: keyfunc.Const("k"), Limit: core.PerHour(3), Refund: core.RefundFailed},
	}, core.WithIdempotency(core.Idempotency{}))
	require.NoError(t, err)
	ctx := context.Background()
	var first core.Decision
	for i := range 4 {
		d, err := l.Check(ctx, keyfunc.Static{})
		require.NoError(t, err)
		require.Equal(t, i < 3, d.Allowed, "request %d", i)
		if i == 0 {
			first = d
		}
	}
	a, err := l.AllowN(ctx, "a", "k", 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), a.Remaining, "the request b denied took nothing from a")
	require.NoError(t, l.Refund(ctx, &first, 500))
	b, err := l.AllowN(ctx, "b", "k", 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.Remaining, "b's refund")
	require.NoError(t, l.Block(ctx, "a", "k", t0.Add(time.Hour)))
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.False(t, d.Allowed, "blocked")
	require.NoError(t, l.ClearOverride(ctx, "a", "k"))
	require.NoError(t, l.Reset(ctx, "a", "k"))
	a, err = l.AllowN(ctx, "a", "k", 0)
	require.NoError(t, err)
	require.Equal(t, int64(5), a.Remaining, "Reset")
}

// failingStore fails every Take with err after the first n succeed, and
// every Reset.
type failingStore struct {
	core.Store
	n   int
	err error
}

func (f *failingStore) Take(ctx context.Context, ops []core.Op, out []core.Result) error {
	if f.n <= 0 {
		return f.err
	}
	f.n--
	return f.Store.Take(ctx, ops, out)
}

func (f *failingStore) Reset(context.Context, core.Key, core.Limit) error { return f.err }

// A store's error names the policy it decided, or every policy of the
// group it decided together.
func TestStoreErrorsNameThePolicy(t *testing.T) {
	ms, _ := frozen(t)
	boom := errors.New("backend down")
	fs := &failingStore{Store: ms, err: boom}
	one, err := core.NewLimiter(fs, []core.Policy{{Name: "first", Key: keyfunc.Const("k"), Limit: core.PerHour(3)}})
	require.NoError(t, err)
	_, err = one.Check(context.Background(), keyfunc.Static{})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, `policy "first"`)
	two, err := core.NewLimiter(fs, []core.Policy{
		{Name: "first", Key: keyfunc.Const("k"), Limit: core.PerHour(3)},
		{Name: "second", Key: keyfunc.Const("k"), Limit: core.PerHour(3)},
	})
	require.NoError(t, err)
	_, err = two.Check(context.Background(), keyfunc.Static{})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, `policies "first", "second"`)
	require.ErrorIs(t, two.Reset(context.Background(), "first", "k"), boom)
}

// blockingStore waits for its context before answering: a Store of one's
// own that may block, which WithStoreTimeout is for.
type blockingStore struct{ core.Store }

func (b blockingStore) Take(ctx context.Context, _ []core.Op, _ []core.Result) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestStoreTimeout(t *testing.T) {
	ms, _ := frozen(t)
	ps := []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(3)}}
	_, err := core.NewLimiter(ms, ps, core.WithStoreTimeout(-time.Second))
	require.Error(t, err)
	l, err := core.NewLimiter(blockingStore{ms}, ps, core.WithStoreTimeout(20*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	_, err = l.Check(context.Background(), keyfunc.Static{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)

	// The bound applies to refunds too, and a fast store is unaffected.
	l, err = core.NewLimiter(ms, []core.Policy{{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(3), Refund: core.RefundFailed}},
		core.WithStoreTimeout(time.Minute))
	require.NoError(t, err)
	d, err := l.Check(context.Background(), keyfunc.Static{})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, l.Refund(context.Background(), &d, 500))
	p, err := l.Peek(context.Background(), keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, int64(3), p.Results[0].Remaining)
}

// Overrides and blocks through the Limiter, and their errors.
func TestOverrideTable(t *testing.T) {
	s, at := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(2)},
		{Name: "q", Key: keyfunc.Header("U"), Limit: core.PerHour(100)},
	})
	require.NoError(t, err)
	ctx := context.Background()
	alice := keyfunc.Static{Headers: map[string][]string{"U": {"alice"}}}
	bob := keyfunc.Static{Headers: map[string][]string{"U": {"bob"}}}
	admitted := func(r keyfunc.Request, n int) int {
		got := 0
		for range n {
			d, err := l.Check(ctx, r)
			require.NoError(t, err)
			if d.Allowed {
				got++
			}
		}
		return got
	}

	until := t0.Add(time.Hour)
	require.ErrorIs(t, l.SetOverride(ctx, "p", "alice", core.Limit{}, until), core.ErrInvalidLimit, "a zero Limit is Block's job")
	require.ErrorContains(t, l.SetOverride(ctx, "nope", "alice", core.PerHour(5), until), `no policy "nope"`)
	require.ErrorIs(t, l.SetOverride(ctx, "p", "", core.PerHour(5), until), core.ErrNoKey)
	require.ErrorContains(t, l.SetOverride(ctx, "p", "alice", core.PerHour(-1), until), `policy "p"`)
	require.Error(t, l.SetOverride(ctx, "p", "alice", core.PerHour(5), t0.Add(-time.Second)), "an override that already ended")

	require.NoError(t, l.SetOverride(ctx, "p", "alice", core.PerHour(5), until))
	require.Equal(t, 5, admitted(alice, 8), "alice's override applies")
	require.Equal(t, 2, admitted(bob, 4), "bob keeps the policy's limit")

	require.NoError(t, l.ClearOverride(ctx, "p", "alice"))
	require.NoError(t, l.Reset(ctx, "p", "alice"))
	require.Equal(t, 2, admitted(alice, 4), "cleared: the policy's limit again")

	require.NoError(t, l.Block(ctx, "q", "bob", until))
	d, err := l.Check(ctx, bob)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "q", d.Bound().Policy)
	require.Equal(t, time.Hour, d.Bound().RetryAfter, "blocked until the block ends")
	*at += time.Hour + time.Second
	require.NoError(t, l.Reset(ctx, "p", "bob"))
	require.Equal(t, 1, admitted(bob, 1), "the block ended")
	require.ErrorContains(t, l.Block(ctx, "nope", "bob", until), `no policy "nope"`)
	require.ErrorContains(t, l.ClearOverride(ctx, "nope", "bob"), `no policy "nope"`)
}

func TestResetTable(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(1), Tiers: map[string]core.Limit{"gold": core.PerHour(2)}},
		{Name: "q", Key: keyfunc.Header("U"), Limit: core.PerHour(1)},
	}, core.WithTiering(core.Tiering{
		Key: keyfunc.Header("U"),
		Resolve: func(_ context.Context, id string) (string, error) {
			if id == "g" {
				return "gold", nil
			}
			return "", nil
		},
	}))
	require.NoError(t, err)
	ctx := context.Background()
	req := func(u string) keyfunc.Static { return keyfunc.Static{Headers: map[string][]string{"U": {u}}} }
	for _, u := range []string{"a", "g"} {
		d, err := l.Check(ctx, req(u))
		require.NoError(t, err)
		require.True(t, d.Allowed)
		d, err = l.Check(ctx, req(u))
		require.NoError(t, err)
		require.False(t, d.Allowed, u)
	}
	require.ErrorContains(t, l.Reset(ctx, "nope", "a"), `no policy "nope"`)
	// Resetting q frees q only.
	require.NoError(t, l.Reset(ctx, "q", "a"))
	d, err := l.Peek(ctx, req("a"))
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1}, []int64{d.Results[0].Remaining, d.Results[1].Remaining})
	// Resetting p frees it under its tier's limit too.
	require.NoError(t, l.Reset(ctx, "p", "a"))
	require.NoError(t, l.Reset(ctx, "p", "g"))
	require.NoError(t, l.Reset(ctx, "q", "g"))
	for _, u := range []string{"a", "g"} {
		d, err := l.Check(ctx, req(u))
		require.NoError(t, err)
		require.True(t, d.Allowed, u)
	}
}

func TestPoliciesAndSetPolicies(t *testing.T) {
	s, _ := frozen(t)
	ps := []core.Policy{
		{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(3)},
		{Name: "q", Key: keyfunc.Const("k"), Limit: core.PerHour(10)},
	}
	l, err := core.NewLimiter(s, ps)
	require.NoError(t, err)
	got := l.Policies()
	require.Len(t, got, 2)
	require.Equal(t, []string{"p", "q"}, []string{got[0].Name, got[1].Name})
	got[0].Name = "changed"
	require.Equal(t, "p", l.Policies()[0].Name, "Policies returns a copy")

	ctx := context.Background()
	_, err = l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)

	// Invalid: the current policies stay.
	require.Error(t, l.SetPolicies([]core.Policy{{Name: "p", Limit: core.PerHour(3)}}))
	require.Error(t, l.SetPolicies(nil))
	require.Len(t, l.Policies(), 2)

	// p keeps its name and its count; r is new; q is gone.
	require.NoError(t, l.SetPolicies([]core.Policy{
		{Name: "r", Key: keyfunc.Const("k"), Limit: core.PerHour(4)},
		{Name: "p", Key: keyfunc.Const("k"), Limit: core.PerHour(3)},
	}))
	d, err := l.Check(ctx, keyfunc.Static{})
	require.NoError(t, err)
	require.Equal(t, []string{"r", "p"}, names(d))
	require.Equal(t, int64(3), d.Results[0].Remaining)
	require.Equal(t, int64(1), d.Results[1].Remaining, "p kept its count")
	require.True(t, slices.EqualFunc(l.Policies(), []string{"r", "p"}, func(p core.Policy, n string) bool { return p.Name == n }))
}

// Cost and key of a Call, and its errors.
func TestCallTable(t *testing.T) {
	s, _ := frozen(t)
	l, err := core.NewLimiter(s, []core.Policy{
		{Name: "p", Key: keyfunc.Header("U"), Limit: core.PerHour(10)},
	})
	require.NoError(t, err)
	ctx := context.Background()
	r := keyfunc.Static{Headers: map[string][]string{"U": {"alice"}}}
	cases := []struct {
		call      core.Call
		allowed   bool
		remaining int64
		err       error
	}{
		{core.Call{}, true, 9, nil},
		{core.Call{Cost: 4}, true, 5, nil},
		{core.Call{Cost: 6}, false, 5, nil},
		{core.Call{Cost: 11}, false, 5, nil},
		{core.Call{Cost: -1}, false, 0, core.ErrInvalidCost},
		{core.Call{Cost: 5, Key: keyfunc.Const("bob")}, true, 5, nil},
		{core.Call{Cost: 5}, true, 0, nil},
		{core.Call{Key: keyfunc.Header("Missing")}, false, 0, core.ErrNoKey},
	}
	for i, c := range cases {
		d, err := l.CheckWith(ctx, r, c.call)
		if c.err != nil {
			require.ErrorIs(t, err, c.err, "case %d", i)
			continue
		}
		require.NoError(t, err, "case %d", i)
		require.Equal(t, c.allowed, d.Allowed, "case %d", i)
		require.Equal(t, c.remaining, d.Results[0].Remaining, "case %d", i)
		if c.call.Cost == 11 {
			require.True(t, d.Bound().Never(), "a cost above the capacity can never pass")
			require.Equal(t, core.RetryNever, d.Bound().RetryAfter)
		}
	}
}

func TestNamesTable(t *testing.T) {
	for a := core.TokenBucket; a <= core.GCRA; a++ {
		got, err := core.ParseAlgorithm(a.String())
		require.NoError(t, err)
		require.Equal(t, a, got)
		require.True(t, a.Valid())
	}
	_, err := core.ParseAlgorithm("token-bucket")
	require.ErrorIs(t, err, core.ErrInvalidLimit)
	require.Equal(t, "Algorithm(0)", core.Algorithm(0).String())
	require.False(t, core.Algorithm(0).Valid())
	require.True(t, core.GCRA.Bucket())
	require.False(t, core.FixedWindow.Bucket())
	// AlgorithmNames lists each algorithm once, in the order of the
	// constants, as String names it; a caller changing the slice changes
	// no other caller's.
	names := core.AlgorithmNames()
	require.Len(t, names, int(core.GCRA))
	for i, n := range names {
		require.Equal(t, core.Algorithm(i+1).String(), n)
	}
	names[0] = "changed"
	require.Equal(t, "token_bucket", core.AlgorithmNames()[0])

	require.Equal(t, []string{"normal", "warning", "throttled"},
		[]string{core.Normal.String(), core.Warning.String(), core.Throttled.String()})
	require.Contains(t, core.State(9).String(), "9")
	require.Equal(t, "skip", core.SkipPolicy.String())
	require.Equal(t, "deny", core.DenyRequest.String())
	require.Contains(t, core.MissingKey(7).String(), "7")

	sources := map[core.Source]string{
		core.FromStore: "store", core.FromDenyCache: "deny_cache", core.FailedOpen: "failed_open",
		core.FailedClosed: "failed_closed", core.FromFallback: "fallback", core.Source(42): "Source(42)",
	}
	for s, want := range sources {
		require.Equal(t, want, s.String())
		require.Equal(t, s == core.FailedOpen || s == core.FailedClosed || s == core.FromFallback || s == 42, s.Degraded(), want)
	}
	outcomes := []string{"allowed", "warning", "denied", "shadow_denied", "repeat", "failed_open", "failed_closed", "fallback"}
	for o := core.Outcome(0); o < core.NumOutcomes; o++ {
		require.Equal(t, outcomes[o], o.String())
	}
	require.Equal(t, "Outcome(200)", core.Outcome(200).String())

	require.Equal(t, "100/1m0s token_bucket burst=150", core.PerMinute(100).WithBurst(150).String())
	require.Contains(t, core.Limit{}.String(), "Algorithm(0)")
}

func TestLimitValidateTable(t *testing.T) {
	cases := []struct {
		l    core.Limit
		want string // "" means valid
	}{
		{core.PerSecond(1), ""},
		{core.PerHour(100).WithAlgorithm(core.GCRA).WithBurst(500), ""},
		{core.PerMinute(10).WithAlgorithm(core.FixedWindow), ""},
		{core.Limit{}, "Algorithm"},
		{core.PerSecond(0), "Rate"},
		{core.Per(5, 0), "Period"},
		{core.Per(5, time.Nanosecond), "Period"},
		{core.Per(5, 1500*time.Nanosecond), "Period"},
		{core.PerSecond(5).WithBurst(-1), "Burst"},
		{core.PerMinute(10).WithAlgorithm(core.FixedWindow).WithBurst(20), "Burst"},
		{core.PerSecond(core.MaxRate + 1), "Rate"},
		{core.PerSecond(core.MaxLogRate + 1).WithAlgorithm(core.SlidingWindowLog), "Rate"},
		{core.PerSecond(core.MaxCounterRate + 1).WithAlgorithm(core.SlidingWindowCounter), "Rate"},
		{core.PerSecond(5).WithAlgorithm(core.Algorithm(99)), "Algorithm"},
	}
	for _, c := range cases {
		err := c.l.Validate()
		if c.want == "" {
			require.NoError(t, err, "%+v", c.l)
			continue
		}
		require.ErrorIs(t, err, core.ErrInvalidLimit, "%+v", c.l)
		require.ErrorContains(t, err, c.want, "%+v", c.l)
	}
	for _, c := range []struct {
		th core.Thresholds
		ok bool
	}{
		{core.Thresholds{}, true},
		{core.Thresholds{Warn: 0.9, Clear: 0.5}, true},
		{core.Thresholds{Warn: 0.5, Clear: 0.5}, true},
		{core.Thresholds{Warn: 1, Clear: 0.5}, false},
		{core.Thresholds{Warn: 0.5, Clear: 0.6}, false},
		{core.Thresholds{Warn: 0.5, Clear: 0}, false},
	} {
		require.Equal(t, c.ok, c.th.Validate() == nil, "%+v", c.th)
	}
	require.Equal(t, core.Thresholds{Warn: 0.8, Clear: 0.7}, core.Thresholds{}.OrDefault())
}

// Outcome's order of precedence over a Decision's fields.
func TestOutcomeTable(t *testing.T) {
	cases := []struct {
		p      core.PolicyResult
		repeat bool
		want   core.Outcome
	}{
		{core.PolicyResult{Result: core.Result{Allowed: true}}, false, core.OutcomeAllowed},
		{core.PolicyResult{Result: core.Result{Allowed: true, State: core.Warning}}, false, core.OutcomeWarning},
		{core.PolicyResult{Result: core.Result{}}, false, core.OutcomeDenied},
		{core.PolicyResult{Shadow: true, Result: core.Result{}}, false, core.OutcomeShadowDenied},
		{core.PolicyResult{Shadow: true, Result: core.Result{Allowed: true}}, false, core.OutcomeAllowed},
		{core.PolicyResult{Result: core.Result{Allowed: true}}, true, core.OutcomeRepeat},
		{core.PolicyResult{Result: core.Result{Allowed: true, Source: core.FailedOpen}}, true, core.OutcomeFailedOpen},
		{core.PolicyResult{Result: core.Result{Source: core.FailedClosed}}, false, core.OutcomeFailedClosed},
		{core.PolicyResult{Result: core.Result{Allowed: true, Source: core.FromFallback}}, false, core.OutcomeFallback},
		{core.PolicyResult{Result: core.Result{Source: core.FromDenyCache}}, false, core.OutcomeDenied},
	}
	for i, c := range cases {
		d := core.Decision{Results: []core.PolicyResult{c.p}, Repeat: c.repeat}
		require.Equal(t, c.want, d.Outcome(0), "case %d", i)
		require.Equal(t, c.p.Source.Degraded(), d.Degraded(), "case %d", i)
	}
}
