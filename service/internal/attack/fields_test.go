package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/internal/badrequest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rules"
)

// doorNames are each front door's names of the fields of core.Limit: the
// vocabulary of its own input, into which it renames the field core's
// *core.FieldError names.
var doorNames = map[string]map[string]string{
	"admin API":  {"Algorithm": "algorithm", "Rate": "limit", "Period": "window_seconds", "Burst": "burst"},
	"rules file": {"Algorithm": "algorithm", "Rate": "limit", "Period": "window_seconds", "Burst": "burst"},
	// the file's deprecated spellings, still read: named as written
	"rules file, old names": {"Algorithm": "algorithm", "Rate": "rate", "Period": "period", "Burst": "burst"},
	"Envoy file":            {"Algorithm": "algorithm", "Rate": "requests_per_unit", "Period": "unit", "Burst": "burst"},
	"store API":             {"Algorithm": "algorithm", "Rate": "rate", "Period": "period", "Burst": "burst"},
	"remote":                {"Algorithm": "Algorithm", "Rate": "Rate", "Period": "Period", "Burst": "Burst"},
}

// TestAttackFieldErrorsEveryDoor: every way core.Limit.Validate refuses a
// limit (limitertest.InvalidLimits, generated from its checks) is refused
// by every front door that reads a limit and can express it, naming the
// field core names, in the door's vocabulary: the admin API (the one field
// of its problem+json errors), the rules file in its names and in its
// deprecated ones and an Envoy rules file (file:line: rules[0].limit:
// message), the store API over gRPC (its
// google.rpc.BadRequest names ops[0].limit.rate) and remotestore, whose
// error is the *core.FieldError a local store returns. Where core decides
// (no check of the door's own came first), the message is core's. On main
// the admin API named a field by cutting core's message apart, and the
// store API and remotestore named none.
func TestAttackFieldErrorsEveryDoor(t *testing.T) {
	store := memStore(t)
	admin := startAdminStack(t, "", store, adminauth.Options{WritesPerMinute: 1000, ReadsPerMinute: 1000}, "ops")
	s := startStack(t, store, "rules:\n  - {name: r, dimension: user, rate: 5, period: 1m}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := ratelimitv1.NewStoreServiceClient(s.conn)
	tried := map[string]int{}
	defer func() { t.Logf("cases tried per door: %v", tried) }()
	for _, c := range limitertest.InvalidLimits() {
		fe := refusalOf(t, c.Limit)
		name := func(door string) string { return doorNames[door][fe.Field] }
		what := fmt.Sprintf("check %d (%s): %v", c.Check, c.Limit, c.Limit.Validate())

		if body, ok := adminRule(c.Limit); ok {
			tried["admin API"]++
			st, _, out := admin.do("ops", http.MethodPost, "/api/v1/rules", body)
			require.Equal(t, http.StatusBadRequest, st, "%s: %s", what, out)
			var p struct {
				Errors []core.FieldError `json:"errors"`
			}
			require.NoError(t, json.Unmarshal(out, &p))
			require.Len(t, p.Errors, 1, "%s: %s", what, out)
			require.Equal(t, name("admin API"), p.Errors[0].Field, "admin API, %s", what)
		}

		for _, door := range []string{"rules file", "rules file, old names"} {
			y, ok := nativeYAML(c.Limit, door != "rules file")
			if !ok {
				continue
			}
			tried[door]++
			err := loadRules(t, y)
			require.ErrorContains(t, err, "rules[0]."+name(door)+": ", "%s, %s", door, what)
			if !ownCheck(c.Limit) {
				require.ErrorContains(t, err, "rules[0]."+name(door)+": "+fe.Message, "%s, %s: core's message", door, what)
			}
		}
		if y, ok := envoyYAML(c.Limit); ok {
			tried["Envoy file"]++
			err := loadRules(t, y)
			require.ErrorContains(t, err, ".rate_limit."+name("Envoy file")+": ", "Envoy file, %s", what)
		}

		tried["store API"]++
		tried["remote"]++
		_, err := raw.Take(ctx, &ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{{
			Key:   &ratelimitv1.StoreKey{Identity: []byte("u"), Policy: []byte("p")},
			Limit: &ratelimitv1.StoreLimit{Algorithm: ratelimitv1.StoreAlgorithm(c.Limit.Algorithm), Rate: c.Limit.Rate, Period: durationpb.New(c.Limit.Period), Burst: c.Limit.Burst},
			Cost:  1,
		}}})
		fields := badrequest.Fields(status.Convert(err))
		require.Len(t, fields, 1, "store API, %s: %v", what, err)
		require.Equal(t, "ops[0].limit."+name("store API"), fields[0].Field, "store API, %s", what)
		require.Equal(t, fe.Message, fields[0].Message, "store API, %s", what)

		_, err = limitertest.TakeOne(ctx, s.remote, core.Key{Identity: "u", Policy: "p"}, c.Limit, 1)
		var got *core.FieldError
		require.ErrorAs(t, err, &got, "remote, %s", what)
		require.Equal(t, "ops[0].Limit."+name("remote"), got.Field, "remote, %s", what)
		require.Equal(t, fe.Message, got.Message)
		require.ErrorIs(t, err, core.ErrInvalidLimit)
	}
}

// refusalOf is core's *core.FieldError for l.
func refusalOf(t *testing.T, l core.Limit) *core.FieldError {
	t.Helper()
	var fe *core.FieldError
	require.ErrorAs(t, l.Validate(), &fe)
	return fe
}

// ownCheck reports whether the rules file refuses l with a check of its
// own before core's (a value its fields cannot hold: a rate below 1, a
// negative burst, a period that is no positive duration, an unknown
// algorithm), whose message is the file's.
func ownCheck(l core.Limit) bool {
	return l.Rate < 1 || l.Burst < 0 || l.Period <= 0 || !l.Algorithm.Valid()
}

// algorithmName is l's algorithm as a file or the admin API writes it (an
// invalid one by a name no algorithm has).
func algorithmName(a core.Algorithm) string {
	if !a.Valid() {
		return "no_such_algorithm"
	}
	return a.String()
}

// adminRule is a rule of the admin API with limit l, when its fields can
// hold l: a window of whole seconds.
func adminRule(l core.Limit) (map[string]any, bool) {
	if l.Period%time.Second != 0 {
		return nil, false
	}
	return map[string]any{"id": "bad", "name": "x", "dimension": "user", "algorithm": algorithmName(l.Algorithm),
		"limit": l.Rate, "window_seconds": int64(l.Period / time.Second), "burst": l.Burst, "enabled": true}, true
}

// nativeYAML is a rules file of one rule with limit l, in the file's
// names (when window_seconds can hold l's period: whole seconds) or its
// deprecated ones (rate, and period as a Go duration).
func nativeYAML(l core.Limit, old bool) (string, bool) {
	limit := fmt.Sprintf("limit: %d\n    window_seconds: %d", l.Rate, int64(l.Period/time.Second))
	switch {
	case old:
		limit = fmt.Sprintf("rate: %d\n    period: %s", l.Rate, l.Period)
	case l.Period%time.Second != 0:
		return "", false
	}
	y := fmt.Sprintf("rules:\n  - name: bad\n    dimension: user\n    algorithm: %s\n    %s\n", algorithmName(l.Algorithm), limit)
	if l.Burst != 0 {
		y += fmt.Sprintf("    burst: %d\n", l.Burst)
	}
	return y, true
}

// envoyYAML is an Envoy rules file of one descriptor with limit l, when
// its fields can hold l: a period that is one of Envoy's units, a rate
// that is not 0 (requests_per_unit 0 is a rule that denies).
func envoyYAML(l core.Limit) (string, bool) {
	units := map[time.Duration]string{time.Second: "second", time.Minute: "minute", time.Hour: "hour", 24 * time.Hour: "day"}
	unit, ok := units[l.Period]
	if !ok || l.Rate == 0 {
		return "", false
	}
	y := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n      algorithm: %s\n", unit, l.Rate, algorithmName(l.Algorithm))
	if l.Burst != 0 {
		y += fmt.Sprintf("      burst: %d\n", l.Burst)
	}
	return y, true
}

// loadRules loads a rules file holding y and returns its error.
func loadRules(t *testing.T, y string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(y), 0o600))
	_, err := rules.NewFile(path).Load(context.Background())
	require.Error(t, err, "%s", y)
	require.False(t, strings.Contains(err.Error(), "sluice: invalid limit"), "the file names the field itself: %v", err)
	return err
}

// TestAttackCheckFieldErrorsEveryDoor: an invalid check (each way the
// engine and the front doors refuse one) names the same field at every
// door that decides checks, in the door's vocabulary: the HTTP check API
// (its problem+json's field and errors, body or query), native gRPC's
// CheckRateLimit and a batch's check (google.rpc.BadRequest, checks[0].
// in a batch).
func TestAttackCheckFieldErrorsEveryDoor(t *testing.T) {
	s := startStack(t, memStore(t), "rules:\n  - {name: r, dimension: user, rate: 5, period: 1m}\n")
	long := func(n int) string { return strings.Repeat("x", n) }
	ok := func() *ratelimitv1.CheckRequest {
		return &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "u", Endpoint: "/x"}
	}
	for _, c := range []struct {
		name       string
		bad        func(r *ratelimitv1.CheckRequest)
		http, grpc string
	}{
		{"no dimension", func(r *ratelimitv1.CheckRequest) { r.Dimension = "" }, "key_type", "dimension"},
		{"long dimension", func(r *ratelimitv1.CheckRequest) { r.Dimension = long(129) }, "key_type", "dimension"},
		{"no identifier", func(r *ratelimitv1.CheckRequest) { r.Identifier = "" }, "key_value", "identifier"},
		{"long identifier", func(r *ratelimitv1.CheckRequest) { r.Identifier = long(1025) }, "key_value", "identifier"},
		{"long endpoint", func(r *ratelimitv1.CheckRequest) { r.Endpoint = "/" + long(2048) }, "endpoint", "endpoint"},
		{"negative cost", func(r *ratelimitv1.CheckRequest) { c := int64(-1); r.Cost = &c }, "request_count", "cost"},
		{"long idempotency key", func(r *ratelimitv1.CheckRequest) { r.IdempotencyKey = long(257) }, "idempotency_key", "idempotency_key"},
		{"unknown rule", func(r *ratelimitv1.CheckRequest) { r.RuleId = "nope" }, "rule_id", "rule_id"},
		{"rule of another dimension", func(r *ratelimitv1.CheckRequest) { r.RuleId = "r"; r.Dimension = "ip" }, "rule_id", "rule_id"},
		{"long rule", func(r *ratelimitv1.CheckRequest) { r.RuleId = long(65) }, "rule_id", "rule_id"},
	} {
		req := ok()
		c.bad(req)
		body := map[string]any{"key_type": req.Dimension, "key_value": req.Identifier, "endpoint": req.Endpoint,
			"rule_id": req.RuleId, "idempotency_key": req.IdempotencyKey}
		if req.Cost != nil {
			body["request_count"] = *req.Cost
		}
		st, p := s.httpCheck(t, body)
		require.Equal(t, http.StatusBadRequest, st, "%s: %v", c.name, p)
		require.Equal(t, c.http, p["field"], "HTTP check, %s: %v", c.name, p)
		errs, _ := p["errors"].([]any)
		require.Len(t, errs, 1, "%s: %v", c.name, p)
		require.Equal(t, c.http, errs[0].(map[string]any)["field"], "%s", c.name)

		_, err := s.native.CheckRateLimit(ctxT(t), req)
		fields := badrequest.Fields(status.Convert(err))
		require.NotEmpty(t, fields, "gRPC, %s: %v", c.name, err)
		require.Equal(t, c.grpc, fields[0].Field, "gRPC, %s", c.name)

		b, err := s.native.CheckRateLimitBatch(ctxT(t), &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{req}})
		require.NoError(t, err)
		fields = badrequest.Fields(status.FromProto(b.GetResults()[0].GetError()))
		require.NotEmpty(t, fields, "batch, %s", c.name)
		require.Equal(t, "checks[0]."+c.grpc, fields[0].Field, "batch, %s", c.name)
	}
}
