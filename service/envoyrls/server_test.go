package envoyrls_test

import (
	"context"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/rules"
)

// t0 is the tests' clock start: 30 s into a minute, 30 s into an hour.
var t0 = time.Unix(1_800_000_030, 0)

// clock is a settable time source for the stores.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(at time.Time) *clock       { c := &clock{}; c.ns.Store(at.UnixNano()); return c }
func enRules(*testing.T) string          { return filepath.Join("testdata", "envoy", "rules.yaml") }

// memoryEngine is an engine on a memory store (real clock) under the rules
// file at path, for fuzzing and benchmarks.
func memoryEngine(tb testing.TB, path string, opts ...engine.Option) *engine.Engine {
	tb.Helper()
	st, err := memorystore.New()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(context.Background(), st, rules.NewFile(path), opts...)
	require.NoError(tb, err)
	return e
}

// desc builds a descriptor of key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	out := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// rig is ratelimitd's Envoy front door on a real engine and memory store,
// served over real gRPC on loopback.
type rig struct {
	engine *engine.Engine
	server *envoyrls.Server
	clock  *clock
	addr   string
	client rlsv3.RateLimitServiceClient
}

func start(t *testing.T, rulesFile string) *rig {
	t.Helper()
	c := newClock(t0)
	st, err := memorystore.New(memorystore.WithClock(c.now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	r := startOn(t, st, rulesFile)
	r.clock = c
	return r
}

// startOnRedis is start on a real redis-server, deciding on the same
// explicit clock as start's (t0, 30 s into a minute, ahead of the real
// time: the keys' expiries, which Redis keeps on its own clock, are in the
// future), so that per-minute counters stay in one window however long a
// test takes.
func startOnRedis(t *testing.T, rulesFile string) *rig {
	t.Helper()
	c := newClock(t0)
	st, err := redisstore.New(redistest.StartServer(t).Client(t), redisstore.WithClock(c.now), redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	r := startOn(t, st, rulesFile)
	r.clock = c
	return r
}

// onStores runs test on the memory store and on a real redis-server.
func onStores(t *testing.T, test func(t *testing.T, r *rig)) {
	t.Run("memory", func(t *testing.T) { test(t, start(t, enRules(t))) })
	t.Run("redis", func(t *testing.T) { test(t, startOnRedis(t, enRules(t))) })
}

func startOn(t *testing.T, st core.Store, rulesFile string) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e, err := engine.New(ctx, st, rules.NewFile(rulesFile))
	require.NoError(t, err)
	srv := envoyrls.New(e)
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rig{engine: e, server: srv, addr: lis.Addr().String(), client: rlsv3.NewRateLimitServiceClient(conn)}
}

func (r *rig) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := r.client.ShouldRateLimit(ctx, req)
	require.NoError(t, err)
	require.Len(t, res.GetStatuses(), len(req.GetDescriptors()))
	return res
}

// ruleID is the ID of the rule the descriptor reaches in domain.
func (r *rig) ruleID(t *testing.T, domain string, kv ...string) string {
	t.Helper()
	var es []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	rule, _, ok := r.engine.Snapshot().MatchDescriptor(domain, es)
	require.True(t, ok, "no rule for %v", kv)
	return rule.ID
}

// tool returns the path of an envoyproxy/ratelimit tool in service/.bin,
// installing the tools (scripts/ensure-service-tools.sh) when missing.
func tool(t *testing.T, name string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", ".bin", name))
	require.NoError(t, err)
	if _, err := os.Stat(bin); err != nil {
		script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "ensure-service-tools.sh"))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, script).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return bin
}

// TestENAcceptsTheRulesFile: the Envoy-format file the tests serve is one
// envoyproxy/ratelimit's own config checker accepts.
func TestENAcceptsTheRulesFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool(t, "config_check_cmd"), "-config_dir", filepath.Dir(enRules(t))).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "all rate limit configs ok")
}

// TestENClient drives ShouldRateLimit with envoyproxy/ratelimit's own
// client: 5 per minute per remote address, the sixth over limit, another
// address unaffected.
func TestENClient(t *testing.T) {
	r := start(t, enRules(t))
	bin := tool(t, "client_cmd")
	run := func(descriptors ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := []string{"-dial_string", r.addr, "-domain", "edge"}
		for _, d := range descriptors {
			args = append(args, "-descriptors", d)
		}
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, line := range strings.Split(string(out), "\n") {
			if text, ok := strings.CutPrefix(line, "response: "); ok {
				var res rlsv3.RateLimitResponse
				require.NoError(t, prototext.Unmarshal([]byte(text), &res), "%s", text)
				return &res
			}
		}
		t.Fatalf("no response in the client's output:\n%s", out)
		return nil
	}
	id := r.ruleID(t, "edge", "remote_address", "10.0.0.1")
	for i := range 5 {
		res := run("remote_address=10.0.0.1")
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "check %d", i+1)
		st := res.GetStatuses()[0]
		require.Equal(t, rlsv3.RateLimitResponse_OK, st.GetCode())
		require.Equal(t, uint32(4-i), st.GetLimitRemaining())
		require.Equal(t, &rlsv3.RateLimitResponse_RateLimit{Name: id, RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			protoClone(st.GetCurrentLimit()))
		require.Equal(t, 30*time.Second, st.GetDurationUntilReset().AsDuration())
	}
	res := run("remote_address=10.0.0.1")
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetStatuses()[0].GetCode())
	require.Zero(t, res.GetStatuses()[0].GetLimitRemaining())

	// Two descriptors in one call, as the client's repeated flag sends them:
	// the exhausted address denies the request, and the other consumes
	// nothing.
	res = run("remote_address=10.0.0.2", "remote_address=10.0.0.1")
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetStatuses()[1].GetCode())
	res = run("remote_address=10.0.0.2")
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(4), res.GetStatuses()[0].GetLimitRemaining(), "the denied request consumed nothing")

	// A new window admits again.
	r.clock.advance(30 * time.Second)
	res = run("remote_address=10.0.0.1")
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(4), res.GetStatuses()[0].GetLimitRemaining())
}

// protoClone copies a RateLimit into a plain value comparable with Equal.
func protoClone(l *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse_RateLimit {
	if l == nil {
		return nil
	}
	return &rlsv3.RateLimitResponse_RateLimit{Name: l.GetName(), RequestsPerUnit: l.GetRequestsPerUnit(), Unit: l.GetUnit()}
}

// status is a DescriptorStatus as plain values.
type statusV struct {
	Code      rlsv3.RateLimitResponse_Code
	Limit     *rlsv3.RateLimitResponse_RateLimit
	Remaining uint32
	Reset     time.Duration
	HasReset  bool
}

func statuses(res *rlsv3.RateLimitResponse) []statusV {
	out := make([]statusV, len(res.GetStatuses()))
	for i, s := range res.GetStatuses() {
		out[i] = statusV{Code: s.GetCode(), Limit: protoClone(s.GetCurrentLimit()), Remaining: s.GetLimitRemaining(),
			Reset: s.GetDurationUntilReset().AsDuration(), HasReset: s.GetDurationUntilReset() != nil}
	}
	return out
}

func headers(res *rlsv3.RateLimitResponse) []string {
	var out []string
	for _, h := range res.GetResponseHeadersToAdd() {
		out = append(out, h.GetKey()+": "+h.GetValue())
	}
	return out
}

// TestStatusesAndHeadersExact: every kind of descriptor in one request, with
// go-control-plane's generated client: a limit, a nested limit, an
// unlimited one, one no rule matches; then the same over limit.
func TestStatusesAndHeadersExact(t *testing.T) {
	r := start(t, enRules(t))
	addr := r.ruleID(t, "edge", "remote_address", "x")
	minute := func(n uint32) *rlsv3.RateLimitResponse_RateLimit {
		return &rlsv3.RateLimitResponse_RateLimit{Name: addr, RequestsPerUnit: n, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	}
	apiUser := &rlsv3.RateLimitResponse_RateLimit{Name: r.ruleID(t, "edge", "path", "/api", "user", "u"),
		RequestsPerUnit: 3, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	require.Equal(t, "api-user", apiUser.Name)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("remote_address", "10.1.1.1"),
		desc("path", "/api", "user", "u"),
		desc("client", "internal"),
		desc("nothing", "matches"),
		desc("path", "/api"), // shallower than the rule: no limit
	}}
	res := r.call(t, req)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, []statusV{
		{Code: rlsv3.RateLimitResponse_OK, Limit: minute(5), Remaining: 4, Reset: 30 * time.Second, HasReset: true},
		{Code: rlsv3.RateLimitResponse_OK, Limit: apiUser, Remaining: 2, Reset: time.Second, HasReset: true},
		{Code: rlsv3.RateLimitResponse_OK, Remaining: math.MaxUint32},
		{Code: rlsv3.RateLimitResponse_OK},
		{Code: rlsv3.RateLimitResponse_OK},
	}, statuses(res))
	// RateLimit-Policy lists every rule counted; RateLimit is the binding
	// one, with the fewest requests left: api-user.
	policies := `RateLimit-Policy: "` + addr + `";q=5;w=60, "api-user";q=3;w=1`
	require.Equal(t, []string{
		policies,
		`RateLimit: "api-user";r=2;t=1`,
	}, headers(res))

	// hits_addend 2 for the whole request: api-user has 2 left, so it passes
	// and leaves 0; the address has 4 left and leaves 2.
	req.HitsAddend = 2
	res = r.call(t, req)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, uint32(0), res.GetStatuses()[1].GetLimitRemaining())

	// Over limit: api-user denies; the address consumes nothing.
	req.HitsAddend = 0
	res = r.call(t, req)
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
	require.Equal(t, []statusV{
		{Code: rlsv3.RateLimitResponse_OK, Limit: minute(5), Remaining: 2, Reset: 30 * time.Second, HasReset: true},
		{Code: rlsv3.RateLimitResponse_OVER_LIMIT, Limit: apiUser, Remaining: 0, Reset: time.Second, HasReset: true},
		{Code: rlsv3.RateLimitResponse_OK, Remaining: math.MaxUint32},
		{Code: rlsv3.RateLimitResponse_OK},
		{Code: rlsv3.RateLimitResponse_OK},
	}, statuses(res))
	require.Equal(t, []string{
		policies,
		`RateLimit: "api-user";r=0;t=1`,
		`Retry-After: 1`,
	}, headers(res))
}

// TestAllOrNothing: one descriptor over its limit denies the request and
// none of the others consumes anything, over many rounds.
func TestAllOrNothing(t *testing.T) { onStores(t, testAllOrNothing) }

func testAllOrNothing(t *testing.T, r *rig) {
	both := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("remote_address", "10.2.2.2"), desc("category", "bulk"),
	}}
	for i := range 4 { // bulk: 4 per hour
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.call(t, both).GetOverallCode(), "request %d", i+1)
	}
	for range 10 {
		res := r.call(t, both)
		require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
		require.Equal(t, uint32(1), res.GetStatuses()[0].GetLimitRemaining(), "the address is not charged by a denied request")
	}
	alone := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.2.2.2")}}
	res := r.call(t, alone)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Zero(t, res.GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.call(t, alone).GetOverallCode())
}

// TestPeekAndPerDescriptorHits: a descriptor's own hits_addend overrides the
// request's; 0 peeks (nothing consumed, and the status says whether one
// more would pass).
func TestPeekAndPerDescriptorHits(t *testing.T) { onStores(t, testPeekAndPerDescriptorHits) }

func testPeekAndPerDescriptorHits(t *testing.T, r *rig) {
	peek := desc("remote_address", "10.3.3.3")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		res := r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 4, Descriptors: []*rlcommon.RateLimitDescriptor{peek}})
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
		require.Equal(t, uint32(5), res.GetStatuses()[0].GetLimitRemaining())
	}
	three := desc("remote_address", "10.3.3.3")
	three.HitsAddend = wrapperspb.UInt64(3)
	res := r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*rlcommon.RateLimitDescriptor{three}})
	require.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining())
	res = r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.3.3.3")}})
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode(), "3 > 2 left")
	res = r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{peek}})
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining(), "the denied request and the peeks consumed nothing")
}

// TestNegativeHits: is_negative_hits gives back what was taken in the
// current window, and never more than was taken.
func TestNegativeHits(t *testing.T) { onStores(t, testNegativeHits) }

func testNegativeHits(t *testing.T, r *rig) {
	req := func(hits uint64, negative bool) *rlsv3.RateLimitResponse {
		d := desc("remote_address", "10.4.4.4")
		d.HitsAddend = wrapperspb.UInt64(hits)
		d.IsNegativeHits = negative
		return r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	}
	require.Equal(t, uint32(0), req(5, false).GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, req(1, false).GetOverallCode())
	res := req(2, true)
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, uint32(2), res.GetStatuses()[0].GetLimitRemaining())
	require.Equal(t, uint32(0), req(2, false).GetStatuses()[0].GetLimitRemaining())
	// Giving back more than was taken restores at most the full limit.
	require.LessOrEqual(t, req(100, true).GetStatuses()[0].GetLimitRemaining(), uint32(5))
	require.Equal(t, uint32(4), req(1, false).GetStatuses()[0].GetLimitRemaining())
}

// TestReplacesUnlimitedShadow: envoyproxy/ratelimit's three rule modifiers.
func TestReplacesUnlimitedShadow(t *testing.T) { onStores(t, testReplacesUnlimitedShadow) }

func testReplacesUnlimitedShadow(t *testing.T, r *rig) {
	// vip replaces bulk when both match: bulk (4 per hour) limits nothing.
	both := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("category", "bulk"), desc("plan", "vip"),
	}}
	for i := range 8 {
		res := r.call(t, both)
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode(), "request %d", i+1)
		require.Equal(t, uint32(100-1-i), res.GetStatuses()[1].GetLimitRemaining())
	}
	bulk := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("category", "bulk")}}
	require.Equal(t, uint32(3), r.call(t, bulk).GetStatuses()[0].GetLimitRemaining(), "replaced: bulk counted nothing")

	// unlimited: never limits.
	internal := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1000, Descriptors: []*rlcommon.RateLimitDescriptor{desc("client", "internal")}}
	for range 5 {
		res := r.call(t, internal)
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
		require.Equal(t, uint32(math.MaxUint32), res.GetStatuses()[0].GetLimitRemaining())
		require.Nil(t, res.GetStatuses()[0].GetCurrentLimit())
	}

	// shadow_mode: 1 per minute, counted and reported, never denies.
	trial := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("trial", "t1")}}
	require.Equal(t, uint32(0), r.call(t, trial).GetStatuses()[0].GetLimitRemaining())
	for range 3 {
		res := r.call(t, trial)
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
		require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetStatuses()[0].GetCode())
		require.Zero(t, res.GetStatuses()[0].GetLimitRemaining())
		require.NotNil(t, res.GetStatuses()[0].GetCurrentLimit())
		require.Empty(t, headers(res), "a shadow rule never changes what a client sees")
	}
}

// TestUnknownDomainAndBadInput: a domain no rule names is OK with no limit
// (as envoyproxy/ratelimit answers); malformed requests are INVALID_ARGUMENT
// naming the field.
func TestUnknownDomainAndBadInput(t *testing.T) {
	r := start(t, enRules(t))
	res := r.call(t, &rlsv3.RateLimitRequest{Domain: "nobody", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "1")}})
	require.Equal(t, rlsv3.RateLimitResponse_OK, res.GetOverallCode())
	require.Equal(t, []statusV{{Code: rlsv3.RateLimitResponse_OK}}, statuses(res))

	many := make([]*rlcommon.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("remote_address", "1")
	}
	for _, tc := range []struct {
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: desc("a", strings.Repeat("v", 1025)).Entries}}}, "descriptors[0].entries[0].value"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: desc("a", "b").Entries, HitsAddend: wrapperspb.UInt64(math.MaxUint64)}}}, "descriptors[0].hits_addend"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.client.ShouldRateLimit(ctx, tc.req)
		cancel()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.True(t, strings.HasPrefix(status.Convert(err).Message(), tc.field+":"), "%v", err)
	}
}

// TestConcurrentNeverOverAdmits: many concurrent callers on one descriptor
// pair admit exactly the tighter limit, all or nothing.
func TestConcurrentNeverOverAdmits(t *testing.T) { onStores(t, testConcurrentNeverOverAdmits) }

func testConcurrentNeverOverAdmits(t *testing.T, r *rig) {
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("remote_address", "10.5.5.5"), desc("category", "bulk"),
	}}
	var ok atomic.Int64
	done := make(chan struct{})
	workers := 4 * runtime.GOMAXPROCS(0)
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := r.client.ShouldRateLimit(ctx, req)
				cancel()
				if err == nil && res.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	require.Equal(t, int64(4), ok.Load())
	res := r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.5.5.5")}})
	require.Equal(t, uint32(0), res.GetStatuses()[0].GetLimitRemaining(), "4 admitted of 5, plus this one")
}

// TestRequestLimitIgnored: a descriptor's own `limit` does not replace the
// configured rule (any caller could otherwise set its own limit).
func TestRequestLimitIgnored(t *testing.T) {
	r := start(t, enRules(t))
	d := desc("remote_address", "10.9.0.1")
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typev3.RateLimitUnit_SECOND}
	for i := range 5 {
		res := r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
		require.Equal(t, uint32(5), res.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
		require.Equal(t, uint32(4-i), res.GetStatuses()[0].GetLimitRemaining())
	}
	res := r.call(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, res.GetOverallCode())
}
