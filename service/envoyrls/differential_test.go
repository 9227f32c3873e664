package envoyrls_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// diffRules is the rules file both servers of the differential test serve
// (envoyproxy/ratelimit's format, read by each as it is): every unit the
// test's few seconds can roll over or not, limits 1 to 5, a nested rule, a
// wildcard, an unlimited rule, a replaced one, a shadow one and a ban.
const diffRules = `domain: diff
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api
    descriptors:
      - key: user
        rate_limit: {name: api-user, unit: minute, requests_per_unit: 2}
  - key: path
    value: /hour
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: up
    value: /up/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: plan
    value: free
    rate_limit: {name: free, unit: hour, requests_per_unit: 1}
  - key: plan
    value: vip
    rate_limit:
      name: vip
      unit: minute
      requests_per_unit: 5
      replaces: [{name: free}]
  - key: internal
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// envoyPrefix is envoyproxy/ratelimit's key space on the shared Redis
// (CACHE_KEY_PREFIX); ratelimitd's is its store's prefix.
const envoyPrefix = "envoyrl:"

// startEnvoyRatelimit starts envoyproxy/ratelimit's server (service_cmd
// from service/.bin) on loopback ports, on the redis-server at redisAddr
// with envoyPrefix keys, serving rules, and returns its gRPC address once
// it answers ShouldRateLimit under them. It is killed on cleanup. A start
// that exits before it is ready (a port taken by another process between
// picking it and binding it) is tried again on other ports, three times in
// all.
func startEnvoyRatelimit(t *testing.T, redisAddr, rules string) string {
	t.Helper()
	bin := tool(t, "service_cmd")
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(conf, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(conf, "config.yaml"), []byte(rules), 0o644))
	var logs string
	for range 3 {
		addr, out, ok := launchEnvoyRatelimit(t, bin, redisAddr, root)
		if ok {
			return addr
		}
		logs = out
	}
	t.Fatalf("envoyproxy/ratelimit did not start:\n%s", logs)
	return ""
}

// launchEnvoyRatelimit is one start of startEnvoyRatelimit: the gRPC
// address when it is ready, or its output and false when it exited first.
func launchEnvoyRatelimit(t *testing.T, bin, redisAddr, root string) (addr, logs string, ok bool) {
	t.Helper()
	ports := make([]string, 3)
	for i := range ports {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
		require.NoError(t, lis.Close())
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"GRPC_HOST=127.0.0.1", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT="+ports[0], "PORT="+ports[1], "DEBUG_PORT="+ports[2],
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "CACHE_KEY_PREFIX="+envoyPrefix,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false")
	var out syncBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr = "127.0.0.1:" + ports[0]
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	probe := &rlsv3.RateLimitRequest{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{desc("internal", "probe")}}
	var gone bool         // it exited first
	var last atomic.Value // the probe's last error, as text
	ready := func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := client.ShouldRateLimit(ctx, probe)
		last.Store(fmt.Sprint(err))
		// The unlimited rule answered: the rules are loaded.
		return err == nil && len(res.GetStatuses()) == 1 && res.GetStatuses()[0].GetLimitRemaining() > 0
	}
	if !assert.Eventually(t, ready, 30*time.Second, 20*time.Millisecond) {
		t.Fatalf("envoyproxy/ratelimit not ready in 30 s (last: %v):\n%s", last.Load(), out.String())
	}
	if gone {
		return "", out.String(), false
	}
	return addr, "", true
}

// syncBuf is a bytes buffer for a child's output, safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// diffPair is the two servers of the differential test on one Redis.
type diffPair struct {
	redis *goredis.Client
	ours  rlsv3.RateLimitServiceClient
	envoy rlsv3.RateLimitServiceClient
}

func startDiffPair(t *testing.T) *diffPair {
	t.Helper()
	srv := redistest.StartServer(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(diffRules), 0o644))
	envoyAddr := startEnvoyRatelimit(t, srv.Addr, diffRules)
	st, err := redisstore.New(srv.Client(t), redisstore.WithPrefix("sluice-diff"), redisstore.WithTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	ours := startOn(t, st, path)
	conn, err := grpc.NewClient(envoyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &diffPair{redis: srv.Client(t), ours: ours.client, envoy: rlsv3.NewRateLimitServiceClient(conn)}
}

// answer is one server's reply to one request.
type answer struct {
	res *rlsv3.RateLimitResponse
	err error
}

// both sends req to both servers at once, and returns their answers and
// the instants (Unix seconds) before the first was sent and after the
// last returned.
func (p *diffPair) both(t *testing.T, req *rlsv3.RateLimitRequest) (ours, envoy answer, from, to int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	from = time.Now().Unix()
	wg.Go(func() { ours.res, ours.err = p.ours.ShouldRateLimit(ctx, req) })
	wg.Go(func() { envoy.res, envoy.err = p.envoy.ShouldRateLimit(ctx, req) })
	wg.Wait()
	return ours, envoy, from, time.Now().Unix()
}

// awaitMidSecond waits until the wall clock is at least 50 ms past a whole
// second and 150 ms before the next, so that a step's two calls fall in
// one second (and in one window of every unit).
func awaitMidSecond() {
	for {
		frac := time.Duration(time.Now().UnixNano() % int64(time.Second))
		switch {
		case frac < 50*time.Millisecond:
			time.Sleep(50*time.Millisecond - frac)
		case frac > 850*time.Millisecond:
			time.Sleep(time.Second - frac + 50*time.Millisecond)
		default:
			return
		}
	}
}

// awaitNextSecond waits until 50 ms into the next whole second: the
// per-second windows roll over between two steps.
func awaitNextSecond() {
	frac := time.Duration(time.Now().UnixNano() % int64(time.Second))
	time.Sleep(time.Second - frac + 50*time.Millisecond)
}

// diffDesc is one generated descriptor: its entries, its own hits_addend
// (nil: the request's), and whether its rule is the ban.
type diffDesc struct {
	kv     []string
	hits   *uint64
	banned bool
}

// shapes are the descriptors the generator picks from, by value index:
// every rule, several values of each (so counters are shared), descriptors
// no rule matches (unknown keys and values, too deep, too shallow), and the
// edge cases: no entries, an empty key, an empty value.
var shapes = []func(v string) []string{
	func(v string) []string { return []string{"ip", v} },
	func(v string) []string { return []string{"user", v} },
	func(v string) []string { return []string{"path", "/api", "user", v} },
	func(v string) []string { return []string{"path", "/hour"} },
	func(v string) []string { return []string{"up", "/up/" + v} },
	func(string) []string { return []string{"plan", "free"} },
	func(string) []string { return []string{"plan", "vip"} },
	func(v string) []string { return []string{"internal", v} },
	func(v string) []string { return []string{"trial", v} },
	func(v string) []string { return []string{"banned", v} },
	func(v string) []string { return []string{"nothing", v} },
	func(v string) []string { return []string{"ip", v, "user", v} },
	func(string) []string { return []string{"path", "/api"} },
	func(string) []string { return []string{"up", "/upx"} },
	func(string) []string { return nil },
	func(v string) []string { return []string{"", v} },
	func(string) []string { return []string{"user", ""} },
	func(string) []string { return []string{"ip", ""} },
}

const bannedShape = 9

// genRequest draws a request of one to four descriptors, with
// hits_addend 0 to 7 per descriptor or for the request (above every limit
// included). A descriptor reaching the ban always adds hits (see the
// named difference in TestEnvoyDifferentialBanPeek).
func genRequest(r *rand.Rand, values []string) (*rlsv3.RateLimitRequest, []diffDesc) {
	req := &rlsv3.RateLimitRequest{Domain: "diff"}
	if r.IntN(3) == 0 {
		req.HitsAddend = uint32(r.IntN(8))
	}
	n := 1 + r.IntN(4)
	ds := make([]diffDesc, n)
	for i := range ds {
		s := r.IntN(len(shapes))
		if r.IntN(3) == 0 { // the limited rules more often
			s = r.IntN(9)
		}
		d := diffDesc{kv: shapes[s](values[r.IntN(len(values))]), banned: s == bannedShape}
		if r.IntN(2) == 0 {
			h := uint64(r.IntN(8))
			d.hits = &h
		}
		if d.banned && d.hits != nil && *d.hits == 0 {
			h := uint64(1)
			d.hits = &h
		}
		pd := desc(d.kv...)
		if d.hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.hits)
		}
		req.Descriptors = append(req.Descriptors, pd)
		ds[i] = d
	}
	return req, ds
}

// hitsOf is the hits a descriptor adds: its own hits_addend, else the
// request's, where 0 means 1.
func hitsOf(req *rlsv3.RateLimitRequest, d diffDesc) uint64 {
	if d.hits != nil {
		return *d.hits
	}
	return uint64(max(req.GetHitsAddend(), 1))
}

// unitSeconds is the length of an Envoy unit the rules use.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	}
	panic("unit " + u.String())
}

// envoyKey is envoyproxy/ratelimit's Redis key of a descriptor's counter
// in the window of unit u at sec: prefix, domain, each entry's key and
// value, the window's start.
func envoyKey(kv []string, u rlsv3.RateLimitResponse_RateLimit_Unit, sec int64) string {
	var b strings.Builder
	b.WriteString(envoyPrefix + "diff_")
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i] + "_" + kv[i+1] + "_")
	}
	div := unitSeconds(u)
	b.WriteString(strconv.FormatInt(sec/div*div, 10))
	return b.String()
}

// counter is a counter of one step: its envoyproxy/ratelimit key, its
// limit and the step's hits on it.
type counter struct {
	key   string
	limit uint32
	hits  uint64
}

// expected is what ratelimitd must answer for a step, from
// envoyproxy/ratelimit's answer and its counters, under the differences
// docs/service.md names:
//
//   - nothing of a refused request is counted (all or nothing, the
//     refused descriptor included), and a shadow rule's counter takes
//     nothing from a request it would refuse: envoyproxy/ratelimit counts
//     every hit. A descriptor whose counter took nothing (in ratelimitd)
//     and is within its limit reports what its counter has left before the
//     request: envoyproxy/ratelimit's remaining plus the hits it counted on
//     that counter up to that descriptor;
//   - current_limit.name is the rule's ID where the rule has no name.
//
// It returns the statuses to expect and the counters whose hits
// envoyproxy/ratelimit counted and ratelimitd did not (to take back from
// envoyproxy/ratelimit's counters, so that both go on from one state).
func expected(t *testing.T, p *diffPair, req *rlsv3.RateLimitRequest, ds []diffDesc, envoy *rlsv3.RateLimitResponse, sec int64) (*rlsv3.RateLimitResponse, []counter) {
	t.Helper()
	want := &rlsv3.RateLimitResponse{OverallCode: envoy.GetOverallCode()}
	counters := map[string]*counter{}
	var order []string
	upto := make([]uint64, len(ds))
	for i, st := range envoy.GetStatuses() {
		l := st.GetCurrentLimit()
		if l == nil {
			continue
		}
		k := envoyKey(ds[i].kv, l.GetUnit(), sec)
		c := counters[k]
		if c == nil {
			c = &counter{key: k, limit: l.GetRequestsPerUnit()}
			counters[k] = c
			order = append(order, k)
		}
		c.hits += hitsOf(req, ds[i])
		upto[i] = c.hits
	}
	before := map[string]uint64{}
	var untaken []counter
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, k := range order {
		c := counters[k]
		n, err := p.redis.Get(ctx, k).Uint64()
		require.NoError(t, err, "envoyproxy/ratelimit's counter %s", k)
		require.GreaterOrEqual(t, n, c.hits, k)
		before[k] = n - c.hits
		if envoy.GetOverallCode() != rlsv3.RateLimitResponse_OK || n > uint64(c.limit) {
			untaken = append(untaken, *c)
		}
	}
	for i, st := range envoy.GetStatuses() {
		w := &rlsv3.RateLimitResponse_DescriptorStatus{Code: st.GetCode(), CurrentLimit: protoClone(st.GetCurrentLimit()),
			LimitRemaining: st.GetLimitRemaining(), DurationUntilReset: st.GetDurationUntilReset()}
		if l := st.GetCurrentLimit(); l != nil {
			k := envoyKey(ds[i].kv, l.GetUnit(), sec)
			taken := !slices.ContainsFunc(untaken, func(c counter) bool { return c.key == k })
			if !taken && before[k]+upto[i] <= uint64(l.GetRequestsPerUnit()) {
				w.LimitRemaining = l.GetRequestsPerUnit() - uint32(before[k])
			}
		}
		want.Statuses = append(want.Statuses, w)
	}
	return want, untaken
}

// sameStatuses requires ratelimitd's response to be want, field by field;
// current_limit.name is compared where envoyproxy/ratelimit states one.
func sameStatuses(t *testing.T, want, got *rlsv3.RateLimitResponse, where string) {
	t.Helper()
	require.Equal(t, want.GetOverallCode().String(), got.GetOverallCode().String(), "%s: overall code", where)
	require.Len(t, got.GetStatuses(), len(want.GetStatuses()), where)
	for i, w := range want.GetStatuses() {
		g := got.GetStatuses()[i]
		at := fmt.Sprintf("%s: status %d", where, i)
		require.Equal(t, w.GetCode().String(), g.GetCode().String(), "%s: code", at)
		require.Equal(t, w.GetLimitRemaining(), g.GetLimitRemaining(), "%s: limit_remaining", at)
		require.Equal(t, w.GetCurrentLimit() == nil, g.GetCurrentLimit() == nil, "%s: current_limit %v, got %v", at, w.GetCurrentLimit(), g.GetCurrentLimit())
		if wl := w.GetCurrentLimit(); wl != nil {
			gl := g.GetCurrentLimit()
			require.Equal(t, wl.GetRequestsPerUnit(), gl.GetRequestsPerUnit(), "%s: requests_per_unit", at)
			require.Equal(t, wl.GetUnit().String(), gl.GetUnit().String(), "%s: unit", at)
			if wl.GetName() != "" {
				require.Equal(t, wl.GetName(), gl.GetName(), "%s: name", at)
			}
		}
		require.Equal(t, w.GetDurationUntilReset() == nil, g.GetDurationUntilReset() == nil, "%s: duration_until_reset %v, got %v", at, w.GetDurationUntilReset(), g.GetDurationUntilReset())
		require.Equal(t, w.GetDurationUntilReset().AsDuration(), g.GetDurationUntilReset().AsDuration(), "%s: duration_until_reset", at)
	}
}

// TestEnvoyDifferential replays random request sequences to
// envoyproxy/ratelimit's own server and to ratelimitd, both on one
// redis-server (each in its own key space) and at the same instants, and
// requires every status field and the overall code to be equal, but for
// the differences docs/service.md names (see expected). A step whose two
// calls fell in different seconds (a window edge between them) starts its
// sequence again on an empty Redis.
func TestEnvoyDifferential(t *testing.T) {
	p := startDiffPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	steps, restarts, over, untakenSeen := 0, 0, 0, 0
	for seq := range 5 {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(seq)))
		seed := r.Uint64()
		r = rand.New(rand.NewPCG(seed, 7))
		values := []string{fmt.Sprintf("a%d-%x", seq, seed%4096), fmt.Sprintf("b%d-%x", seq, seed%4096)}
		for step := 0; step < 40; step++ {
			require.NoError(t, ctx.Err())
			if r.IntN(20) == 0 {
				awaitNextSecond()
			}
			awaitMidSecond()
			req, ds := genRequest(r, values)
			ours, envoy, from, to := p.both(t, req)
			where := fmt.Sprintf("sequence %d (seed %d) step %d: %v", seq, seed, step, req)
			if from != to {
				restarts++
				require.NoError(t, p.redis.FlushAll(ctx).Err())
				continue
			}
			steps++
			require.NoError(t, envoy.err, "%s: envoyproxy/ratelimit", where)
			require.NoError(t, ours.err, "%s: ratelimitd", where)
			want, untaken := expected(t, p, req, ds, envoy.res, from)
			sameStatuses(t, want, ours.res, where)
			if envoy.res.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				over++
			}
			untakenSeen += len(untaken)
			for _, c := range untaken {
				require.NoError(t, p.redis.DecrBy(ctx, c.key, int64(c.hits)).Err())
			}
		}
	}
	t.Logf("%d steps compared (%d over the limit, %d counters envoyproxy/ratelimit charged and ratelimitd did not), %d restarted at a window edge",
		steps, over, untakenSeen, restarts)
	require.Greater(t, steps, 150)
	require.Greater(t, over, 20, "the sequences reach the limits")
}

// TestEnvoyDifferentialEdges: the requests at the edge of the protocol, to
// both servers: no descriptors and no domain are errors for both
// (ratelimitd says INVALID_ARGUMENT, envoyproxy/ratelimit UNKNOWN); a
// descriptor without entries, with an empty key or an empty value, and a
// domain no rule names are answered as envoyproxy/ratelimit answers them.
func TestEnvoyDifferentialEdges(t *testing.T) {
	p := startDiffPair(t)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "diff"},
		{Domain: "", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "x")}},
		{Domain: ""},
	} {
		ours, envoy, _, _ := p.both(t, req)
		require.Error(t, envoy.err, "%v", req)
		require.Equal(t, codes.InvalidArgument, status.Code(ours.err), "%v: %v", req, ours.err)
	}
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{{}}},
		{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{{}, desc("user", "edge"), {}}},
		{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "", Value: "x"}}}}},
		{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{}}}}},
		{Domain: "diff", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", ""), desc("user", "")}},
		{Domain: "unknown", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "x"), {}}},
	} {
		awaitMidSecond()
		ours, envoy, from, to := p.both(t, req)
		require.NoError(t, envoy.err, "%v", req)
		require.NoError(t, ours.err, "%v", req)
		if from == to {
			var ds []diffDesc
			for _, d := range req.GetDescriptors() {
				var kv []string
				for _, e := range d.GetEntries() {
					kv = append(kv, e.GetKey(), e.GetValue())
				}
				ds = append(ds, diffDesc{kv: kv})
			}
			want, _ := expected(t, p, req, ds, envoy.res, from)
			sameStatuses(t, want, ours.res, fmt.Sprint(req))
		}
	}
}
