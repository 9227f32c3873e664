package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// TestAttackDecisionModel drives random calls through every front door of
// one instance over real gRPC and HTTP on loopback (native CheckRateLimit,
// GetRemainingQuota, Report, ResetLimit, plain and all-or-nothing batches,
// the HTTP JSON check in body and status mode, Envoy's ShouldRateLimit and
// its /json, the engine's Usage) on one rule set of every kind (limits on
// no endpoint and on patterns, tiers, an override and a block, shadow,
// Deny, shadow Deny and unlimited rules, a rule reached only by rule_id,
// another dimension, Envoy rules of each kind), with random dimensions,
// identifiers, endpoints (empty included), rule_ids, costs (0 included)
// and idempotency keys, on memory and on a real redis-server, and compares
// every answer (allowed, the binding rule, its limit and what is left;
// each Envoy status) with one exact model of the rules' fixed windows.
func TestAttackDecisionModel(t *testing.T) {
	addr := newRedis(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			// The windows are aligned on the hour: a frozen clock keeps
			// every check in one.
			store, now := frozenStore(t, backend, addr)
			suffix := fmt.Sprintf("%s-%d", backend, time.Now().UnixNano())
			m := newOneModel(suffix)
			snap, err := decisionRules(m, suffix, now())
			require.NoError(t, err)
			d := &doors{t: t, s: startStackOn(t, store, fixedSource{snap}, engine.WithClock(now)), m: m, suffix: suffix}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			d.ctx = ctx
			r := rand.New(rand.NewPCG(seed, uint64(len(backend))))
			for step := range 500 {
				d.step(r, step)
			}
		})
	}
}

// doors drives the front doors of s and compares each answer with m.
type doors struct {
	t      *testing.T
	ctx    context.Context
	s      *stack
	m      *oneModel
	suffix string
	last   mcheck // the last check made, which a retry repeats
}

var (
	modelEndpoints = []string{"", "/", "/heavy", "/heavy/x", "/items/7", "/admin/x", "/free", "/beta", "/other"}
	modelUserRules = []string{"base", "heavy", "partner", "banned", "free", "items"}
)

// randomCheck is a check of a random caller, endpoint, rule_id, cost and
// idempotency key, or, one time in three, a retry of the last one.
func (d *doors) randomCheck(r *rand.Rand) mcheck {
	if r.IntN(3) == 0 && d.last.id != "" {
		return d.last
	}
	c := mcheck{dim: "user", endpoint: modelEndpoints[r.IntN(len(modelEndpoints))], cost: int64(r.IntN(4))}
	if r.IntN(7) == 0 {
		c.dim, c.id = "ip", []string{"10.0.0.1-", "10.0.0.2-"}[r.IntN(2)]+d.suffix
		if r.IntN(6) == 0 {
			c.rule = "per-ip"
		}
	} else {
		c.id = []string{"u1", "u2", "goldie", "vip", "jail"}[r.IntN(5)] + "-" + d.suffix
		if r.IntN(6) == 0 {
			c.rule = modelUserRules[r.IntN(len(modelUserRules))]
		}
	}
	if r.IntN(2) == 0 {
		c.key = []string{"k1", "k2"}[r.IntN(2)]
	}
	d.last = c
	return c
}

func (c mcheck) request() *ratelimitv1.CheckRequest {
	return &ratelimitv1.CheckRequest{Dimension: c.dim, Identifier: c.id, Endpoint: c.endpoint, RuleId: c.rule, Cost: proto.Int64(c.cost), IdempotencyKey: c.key}
}

func fromResponse(r *ratelimitv1.CheckResponse) answer {
	return answer{allowed: r.GetAllowed(), rule: r.GetRule(), limit: r.GetLimit(), remaining: r.GetRemaining()}
}

// step makes one random call and compares its answer with the model's.
func (d *doors) step(r *rand.Rand, step int) {
	t := d.t
	c := d.randomCheck(r)
	where := fmt.Sprintf("step %d %+v", step, c)
	switch door := r.IntN(12); door {
	case 0, 1: // native check
		resp, err := d.s.native.CheckRateLimit(d.ctx, c.request())
		require.NoError(t, err, where)
		require.Equal(t, d.m.check(c).answer(), fromResponse(resp), "%s: CheckRateLimit", where)
	case 2: // peek
		resp, err := d.s.native.GetRemainingQuota(d.ctx, c.request())
		require.NoError(t, err, where)
		c.cost, c.key = 0, ""
		require.Equal(t, d.m.check(c).answer(), fromResponse(resp), "%s: GetRemainingQuota", where)
	case 3: // report
		resp, err := d.s.native.Report(d.ctx, c.request())
		require.NoError(t, err, where)
		require.Equal(t, d.m.report(c).answer(), fromResponse(resp), "%s: Report", where)
	case 4, 5: // batch, plain or all or nothing
		d.batch(r, c, door == 5, where)
	case 6: // HTTP JSON, body or status mode
		d.http(c, r.IntN(2) == 0, where)
	case 7, 8: // Envoy, gRPC or /json
		d.envoy(r, door == 8, where)
	case 9: // usage
		d.usage(c, where)
	case 10: // reset, of callers without an override
		if strings.HasPrefix(c.id, "vip-") || strings.HasPrefix(c.id, "jail-") {
			return
		}
		_, err := d.s.native.ResetLimit(d.ctx, &ratelimitv1.ResetRequest{Dimension: c.dim, Identifier: c.id, Endpoint: c.endpoint, RuleId: c.rule})
		require.NoError(t, err, where)
		d.m.reset(c)
	default: // retries of one check, past the repeat bound
		for i := range 5 {
			if i%2 == 0 {
				d.http(c, false, where)
				continue
			}
			resp, err := d.s.native.CheckRateLimit(d.ctx, c.request())
			require.NoError(t, err, where)
			require.Equal(t, d.m.check(c).answer(), fromResponse(resp), "%s: retry %d", where, i)
		}
	}
}

// batch sends c and up to three more random checks in one batch.
func (d *doors) batch(r *rand.Rand, c mcheck, allOrNothing bool, where string) {
	cs := []mcheck{c}
	for range r.IntN(4) {
		cs = append(cs, d.randomCheck(r))
	}
	req := &ratelimitv1.BatchRequest{AllOrNothing: allOrNothing}
	for _, c := range cs {
		req.Checks = append(req.Checks, c.request())
	}
	resp, err := d.s.native.CheckRateLimitBatch(d.ctx, req)
	require.NoError(d.t, err, where)
	var want []mdec
	if allOrNothing {
		want = d.m.batch(cs)
	} else {
		for _, c := range cs {
			want = append(want, d.m.check(c))
		}
	}
	require.Len(d.t, resp.GetResults(), len(cs), where)
	for i, res := range resp.GetResults() {
		require.Nil(d.t, res.GetError(), "%s: batch check %d", where, i)
		require.Equal(d.t, want[i].answer(), fromResponse(res.GetResponse()), "%s: batch (all or nothing %v) check %d %+v of %+v", where, allOrNothing, i, cs[i], cs)
	}
}

// http asks the HTTP check API, in status mode or not.
func (d *doors) http(c mcheck, statusMode bool, where string) {
	body := map[string]any{"key_type": c.dim, "key_value": c.id, "endpoint": c.endpoint, "rule_id": c.rule, "request_count": c.cost, "idempotency_key": c.key}
	raw, err := json.Marshal(body)
	require.NoError(d.t, err)
	path := httpapi.Path
	if statusMode {
		path += "?mode=status"
	}
	code, out := d.s.post(d.t, path, "application/json", raw)
	want := d.m.check(c).answer()
	wantCode := http.StatusOK
	if statusMode && !want.allowed {
		wantCode = http.StatusTooManyRequests
	}
	require.Equal(d.t, wantCode, code, "%s: HTTP status (status mode %v): %v", where, statusMode, out)
	got := answer{allowed: out["allowed"] == true, rule: out["rule"].(string), limit: int64(out["limit"].(float64)), remaining: int64(out["remaining"].(float64))}
	require.Equal(d.t, want, got, "%s: HTTP check (status mode %v)", where, statusMode)
}

// envoy sends a random Envoy request of one to three descriptors.
func (d *doors) envoy(r *rand.Rand, overJSON bool, where string) {
	keys := [][2]string{{"a", "v1"}, {"a", "v2"}, {"b", "x"}, {"b", "y"}, {"ban", "z"}, {"free", "z"}, {"s", "v1"}, {"none", "z"}}
	var ds []mdesc
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for range 1 + r.IntN(3) {
		k := keys[r.IntN(len(keys))]
		x := mdesc{key: k[0], value: k[1] + "-" + d.suffix, hits: int64(r.IntN(4)), negative: r.IntN(6) == 0}
		if k[0] == "b" {
			x.value = k[1] // a literal value of the rule
		}
		ds = append(ds, x)
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries:        []*ratelimitv3.RateLimitDescriptor_Entry{{Key: x.key, Value: x.value}},
			HitsAddend:     wrapperspb.UInt64(uint64(x.hits)),
			IsNegativeHits: x.negative,
		})
	}
	where = fmt.Sprintf("%s: Envoy (json %v) %+v", where, overJSON, ds)
	over, sts := d.m.descriptors(ds)
	var resp *rlsv3.RateLimitResponse
	if overJSON {
		resp = d.envoyJSON(req, over, where)
	} else {
		var err error
		resp, err = d.s.envoy.ShouldRateLimit(d.ctx, req)
		require.NoError(d.t, err, where)
	}
	want := rlsv3.RateLimitResponse_OK
	if over {
		want = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	require.Equal(d.t, want, resp.GetOverallCode(), where)
	require.Len(d.t, resp.GetStatuses(), len(ds), where)
	for i, st := range resp.GetStatuses() {
		code := rlsv3.RateLimitResponse_OK
		if sts[i].over {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		require.Equal(d.t, code, st.GetCode(), "%s: descriptor %d", where, i)
		require.Equal(d.t, sts[i].remaining, int64(st.GetLimitRemaining()), "%s: descriptor %d remaining", where, i)
	}
}

// envoyJSON sends req to Envoy's /json and returns the decoded answer.
func (d *doors) envoyJSON(req *rlsv3.RateLimitRequest, over bool, where string) *rlsv3.RateLimitResponse {
	var b strings.Builder
	b.WriteString(`{"domain":"edge","descriptors":[`)
	for i, x := range req.GetDescriptors() {
		if i > 0 {
			b.WriteByte(',')
		}
		e := x.GetEntries()[0]
		fmt.Fprintf(&b, `{"entries":[{"key":%q,"value":%q}],"hits_addend":%d,"is_negative_hits":%v}`, e.GetKey(), e.GetValue(), x.GetHitsAddend().GetValue(), x.GetIsNegativeHits())
	}
	b.WriteString(`]}`)
	code, out := d.s.post(d.t, "/json", "application/json", []byte(b.String()))
	wantCode := http.StatusOK
	if over {
		wantCode = http.StatusTooManyRequests
	}
	require.Equal(d.t, wantCode, code, "%s: %v", where, out)
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if out["overallCode"] == "OVER_LIMIT" {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	list, _ := out["statuses"].([]any)
	for _, s := range list {
		st := s.(map[string]any)
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if st["code"] == "OVER_LIMIT" {
			ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if n, ok := st["limitRemaining"].(float64); ok {
			ds.LimitRemaining = uint32(n)
		}
		resp.Statuses = append(resp.Statuses, ds)
	}
	return resp
}

// usage compares the engine's Usage of a user with the model's.
func (d *doors) usage(c mcheck, where string) {
	if c.dim != "user" {
		return
	}
	us, err := d.s.eng.Usage(d.ctx, "user", c.id)
	require.NoError(d.t, err, where)
	var got []musage
	for _, u := range us {
		got = append(got, musage{rule: u.Rule.ID, blocked: u.Blocked, capacity: u.Capacity, remaining: u.Remaining})
	}
	require.Equal(d.t, d.m.usage(c.id), got, "%s: Usage", where)
}
