package adminapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rule is ordersRule's JSON with members replaced (a nil value removes
// the member), for the bad-input table.
func rule(kv ...any) string {
	m := map[string]any{"id": "new", "name": "New", "dimension": "user", "endpoint_pattern": "/api/new/**",
		"limit": 5, "window_seconds": 60, "algorithm": "fixed_window"}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
			continue
		}
		m[kv[i].(string)] = kv[i+1]
	}
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for k, v := range m {
		if !first {
			b.WriteByte(',')
		}
		first = false
		switch v := v.(type) {
		case string:
			fmt.Fprintf(&b, "%q:%q", k, v)
		case raw:
			fmt.Fprintf(&b, "%q:%s", k, v)
		default:
			fmt.Fprintf(&b, "%q:%v", k, v)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// raw is a JSON value written as is.
type raw string

// TestBadRequestsChangeNothing sends every kind of bad request and checks
// its status, its problem+json naming the field, and that the database's
// revision did not move.
func TestBadRequestsChangeNothing(t *testing.T) { onEach(t, testBadRequestsChangeNothing) }

func testBadRequestsChangeNothing(t *testing.T, e *env) {
	for _, body := range []string{ordersRule,
		`{"id":"orders-gold","dimension":"user","endpoint_pattern":"/api/orders/**","limit":50,"window_seconds":60,"algorithm":"fixed_window","tier":"gold"}`,
		`{"id":"ips","dimension":"ip","limit":100,"window_seconds":1,"algorithm":"sliding_window_log"}`,
	} {
		r := e.req("POST", "/api/v1/rules", body)
		require.Equal(t, http.StatusCreated, r.status, r.raw)
	}
	r := e.req("POST", "/api/v1/users/alice/override", `{"rule_id":"orders","block":true,"ttl_seconds":600}`)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	r = e.req("PUT", "/api/v1/users/alice/tier", `{"tier":"gold"}`)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	etag := e.etag(1) // orders
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	tooFar := time.Now().Add(31 * 24 * time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)

	type tc struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		field                    string
	}
	js := []string{"Content-Type", "application/json"}
	reader := e.auth("reader")
	cases := []tc{
		{"malformed JSON", "POST", "/api/v1/rules", `{"id":`, nil, 400, "body"},
		{"syntax error", "POST", "/api/v1/rules", `{"id" "x"}`, nil, 400, "body"},
		{"unknown field", "POST", "/api/v1/rules", rule("rate", 5), nil, 400, "rate"},
		{"trailing data", "POST", "/api/v1/rules", rule() + `{}`, nil, 400, "body"},
		{"member given twice", "POST", "/api/v1/rules", strings.Replace(rule(), `{`, `{"limit":1000000,`, 1), nil, 400, "limit"},
		{"null body", "POST", "/api/v1/rules", `null`, nil, 400, "body"},
		{"array body", "POST", "/api/v1/rules", `[` + rule() + `]`, nil, 400, "body"},
		{"empty body", "POST", "/api/v1/rules", ` `, nil, 400, "body"},
		{"text/plain", "POST", "/api/v1/rules", rule(), []string{"Content-Type", "text/plain"}, 415, "Content-Type"},
		{"no Content-Type", "POST", "/api/v1/rules", rule(), []string{"Content-Type", ""}, 415, "Content-Type"},
		{"latin1 charset", "POST", "/api/v1/rules", rule(), []string{"Content-Type", "application/json; charset=iso-8859-1"}, 415, "Content-Type"},
		{"body over 64 KiB", "POST", "/api/v1/rules", rule("name", strings.Repeat("x", 70<<10)), nil, 413, "body"},
		{"id missing", "POST", "/api/v1/rules", rule("id", nil), nil, 400, "id"},
		{"id null", "POST", "/api/v1/rules", rule("id", raw("null")), nil, 400, "id"},
		{"id with a space", "POST", "/api/v1/rules", rule("id", "a b"), nil, 400, "id"},
		{"id of 65 bytes", "POST", "/api/v1/rules", rule("id", strings.Repeat("a", 65)), nil, 400, "id"},
		{"id a number", "POST", "/api/v1/rules", rule("id", 7), nil, 400, "id"},
		{"dimension missing", "POST", "/api/v1/rules", rule("dimension", nil), nil, 400, "dimension"},
		{"dimension bad", "POST", "/api/v1/rules", rule("dimension", "us er"), nil, 400, "dimension"},
		{"algorithm missing", "POST", "/api/v1/rules", rule("algorithm", nil), nil, 400, "algorithm"},
		{"algorithm unknown", "POST", "/api/v1/rules", rule("algorithm", "leaky"), nil, 400, "algorithm"},
		{"limit missing", "POST", "/api/v1/rules", rule("limit", nil), nil, 400, "limit"},
		{"limit zero", "POST", "/api/v1/rules", rule("limit", 0), nil, 400, "limit"},
		{"limit negative", "POST", "/api/v1/rules", rule("limit", -3), nil, 400, "limit"},
		{"limit a string", "POST", "/api/v1/rules", rule("limit", "5"), nil, 400, "limit"},
		{"limit a fraction", "POST", "/api/v1/rules", rule("limit", 5.5), nil, 400, "limit"},
		{"limit over 2^63", "POST", "/api/v1/rules", rule("limit", raw("9223372036854775808")), nil, 400, "limit"},
		{"limit over the log's bound", "POST", "/api/v1/rules", rule("algorithm", "sliding_window_log", "limit", 10_000_000), nil, 400, "limit"},
		{"window zero", "POST", "/api/v1/rules", rule("window_seconds", 0), nil, 400, "window_seconds"},
		{"window over 100 years", "POST", "/api/v1/rules", rule("window_seconds", int64(101*365*24*3600)), nil, 400, "window_seconds"},
		{"burst on a window", "POST", "/api/v1/rules", rule("burst", 10), nil, 400, "burst"},
		{"burst negative", "POST", "/api/v1/rules", rule("algorithm", "token_bucket", "burst", -1), nil, 400, "burst"},
		{"endpoint without /", "POST", "/api/v1/rules", rule("endpoint_pattern", "api/x"), nil, 400, "endpoint_pattern"},
		{"endpoint ** inside", "POST", "/api/v1/rules", rule("endpoint_pattern", "/api/**/x"), nil, 400, "endpoint_pattern"},
		{"endpoint too long", "POST", "/api/v1/rules", rule("endpoint_pattern", "/"+strings.Repeat("a", 2048)), nil, 400, "endpoint_pattern"},
		{"name with a control character", "POST", "/api/v1/rules", rule("name", raw(`"a\u0007b"`)), nil, 400, "name"},
		{"name too long", "POST", "/api/v1/rules", rule("name", strings.Repeat("n", 257)), nil, 400, "name"},
		{"tier blank", "POST", "/api/v1/rules", rule("tier", "  "), nil, 400, "tier"},
		{"shadow a string", "POST", "/api/v1/rules", rule("shadow", "yes"), nil, 400, "shadow"},
		{"enabled a number", "POST", "/api/v1/rules", rule("enabled", 1), nil, 400, "enabled"},
		{"id exists", "POST", "/api/v1/rules", rule("id", "orders", "endpoint_pattern", "/other"), nil, 409, "id"},
		{"second rule of a dimension and endpoint", "POST", "/api/v1/rules", rule("endpoint_pattern", "/api/orders/**"), nil, 409, "endpoint_pattern"},
		{"tier without its base rule", "POST", "/api/v1/rules", rule("tier", "gold"), nil, 409, "tier"},
		{"tier given twice", "POST", "/api/v1/rules", rule("endpoint_pattern", "/api/orders/**", "tier", "gold"), nil, 409, "tier"},
		{"query on a create", "POST", "/api/v1/rules?dry_run=1", rule(), nil, 400, "dry_run"},
		{"no caller", "POST", "/api/v1/rules", rule(), []string{"Authorization", ""}, 401, ""},
		{"unknown token", "POST", "/api/v1/rules", rule(), []string{"Authorization", "Bearer slk_nope"}, 401, ""},
		{"create with a read token", "POST", "/api/v1/rules", rule(), reader, 403, ""},
		{"replace with a read token", "PUT", "/api/v1/rules/orders", rule("id", nil), append(reader, "If-Match", "*"), 403, ""},
		{"delete with a read token", "DELETE", "/api/v1/rules/orders", "", append(reader, "If-Match", "*"), 403, ""},
		{"tier with a read token", "PUT", "/api/v1/users/bob/tier", `{"tier":"gold"}`, reader, 403, ""},

		{"PUT without If-Match", "PUT", "/api/v1/rules/orders", rule("id", nil), nil, 428, "If-Match"},
		{"PUT stale", "PUT", "/api/v1/rules/orders", rule("id", nil), []string{"If-Match", e.etag(2)}, 412, "If-Match"},
		{"PUT weak etag", "PUT", "/api/v1/rules/orders", rule("id", nil), []string{"If-Match", "W/" + etag}, 412, "If-Match"},
		{"PUT malformed If-Match", "PUT", "/api/v1/rules/orders", rule("id", nil), []string{"If-Match", `1`}, 400, "If-Match"},
		{"PUT unterminated If-Match", "PUT", "/api/v1/rules/orders", rule("id", nil), []string{"If-Match", `"1`}, 400, "If-Match"},
		{"PUT another id", "PUT", "/api/v1/rules/orders", rule("id", "other"), []string{"If-Match", etag}, 400, "id"},
		{"PUT invalid rule", "PUT", "/api/v1/rules/orders", rule("id", nil, "limit", 0), []string{"If-Match", etag}, 400, "limit"},
		{"PUT unknown field", "PUT", "/api/v1/rules/orders", rule("id", nil, "extra", true), []string{"If-Match", etag}, 400, "extra"},
		{"PUT onto another rule's dimension and endpoint", "PUT", "/api/v1/rules/orders", rule("id", nil, "dimension", "ip", "endpoint_pattern", raw(`""`)), []string{"If-Match", etag}, 409, "endpoint_pattern"},
		{"PUT disabling a base with a tier", "PUT", "/api/v1/rules/orders", rule("id", nil, "endpoint_pattern", "/api/orders/**", "enabled", false), []string{"If-Match", etag}, 409, "tier"},
		{"PUT unknown rule", "PUT", "/api/v1/rules/nope", rule("id", nil), []string{"If-Match", "*"}, 404, "id"},
		{"PUT bad path id", "PUT", "/api/v1/rules/a%20b", rule("id", nil), []string{"If-Match", "*"}, 404, "id"},
		{"DELETE without If-Match", "DELETE", "/api/v1/rules/orders", "", nil, 428, "If-Match"},
		{"DELETE stale", "DELETE", "/api/v1/rules/orders", "", []string{"If-Match", e.etag(3)}, 412, "If-Match"},
		{"DELETE a base with a tier", "DELETE", "/api/v1/rules/orders", "", []string{"If-Match", etag}, 409, "tier"},
		{"DELETE unknown", "DELETE", "/api/v1/rules/nope", "", []string{"If-Match", "*"}, 404, "id"},
		{"PATCH", "PATCH", "/api/v1/rules/orders", rule(), nil, 405, "method"},
		{"DELETE the collection", "DELETE", "/api/v1/rules", "", nil, 405, "method"},
		{"unknown path", "GET", "/api/v1/rules/orders/extra", "", nil, 404, "path"},
		{"users without a resource", "GET", "/api/v1/users/bob", "", nil, 404, "path"},
		{"list limit 0", "GET", "/api/v1/rules?limit=0", "", nil, 400, "limit"},
		{"list limit 1001", "GET", "/api/v1/rules?limit=1001", "", nil, 400, "limit"},
		{"list limit text", "GET", "/api/v1/rules?limit=ten", "", nil, 400, "limit"},
		{"list bad cursor", "GET", "/api/v1/rules?cursor=b3JkZXJz", "", nil, 400, "cursor"},
		{"list unknown parameter", "GET", "/api/v1/rules?sort=id", "", nil, 400, "sort"},
		{"list repeated parameter", "GET", "/api/v1/rules?limit=1&limit=2", "", nil, 400, "limit"},
		{"list enabled maybe", "GET", "/api/v1/rules?enabled=maybe", "", nil, 400, "enabled"},
		{"list unknown algorithm", "GET", "/api/v1/rules?algorithm=x", "", nil, 400, "algorithm"},
		{"list bad dimension", "GET", "/api/v1/rules?dimension=a%20b", "", nil, 400, "dimension"},
		{"GET bad If-None-Match", "GET", "/api/v1/rules/orders", "", []string{"If-None-Match", "x"}, 400, "If-None-Match"},

		{"tier missing", "PUT", "/api/v1/users/bob/tier", `{}`, nil, 400, "tier"},
		{"tier blank", "PUT", "/api/v1/users/bob/tier", `{"tier":" "}`, nil, 400, "tier"},
		{"tier too long", "PUT", "/api/v1/users/bob/tier", `{"tier":"` + strings.Repeat("t", 65) + `"}`, nil, 400, "tier"},
		{"tier a number", "PUT", "/api/v1/users/bob/tier", `{"tier":1}`, nil, 400, "tier"},
		{"tier bad dimension", "PUT", "/api/v1/users/bob/tier?dimension=a%20b", `{"tier":"gold"}`, nil, 400, "dimension"},
		{"tier identifier too long", "PUT", "/api/v1/users/" + strings.Repeat("u", 1025) + "/tier", `{"tier":"gold"}`, nil, 400, "id"},
		{"tier unknown field", "PUT", "/api/v1/users/bob/tier", `{"tier":"gold","until":1}`, nil, 400, "until"},
		{"tier POST", "POST", "/api/v1/users/bob/tier", `{"tier":"gold"}`, nil, 405, "method"},
		{"override rule_id missing", "POST", "/api/v1/users/bob/override", `{"block":true,"ttl_seconds":60}`, nil, 400, "rule_id"},
		{"override unknown rule", "POST", "/api/v1/users/bob/override", `{"rule_id":"nope","block":true,"ttl_seconds":60}`, nil, 400, "rule_id"},
		{"override of a tier row", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders-gold","block":true,"ttl_seconds":60}`, nil, 400, "rule_id"},
		{"override of another dimension", "POST", "/api/v1/users/bob/override?dimension=ip", `{"rule_id":"orders","block":true,"ttl_seconds":60}`, nil, 400, "dimension"},
		{"override expiry missing", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true}`, nil, 400, "expires_at"},
		{"override both expiries", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"ttl_seconds":60,"expires_at":"` + future + `"}`, nil, 400, "ttl_seconds"},
		{"override expired", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"expires_at":"` + past + `"}`, nil, 400, "expires_at"},
		{"override beyond 30 days", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"expires_at":"` + tooFar + `"}`, nil, 400, "expires_at"},
		{"override expiry not a time", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"expires_at":"tomorrow"}`, nil, 400, "expires_at"},
		{"override ttl zero", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"ttl_seconds":0}`, nil, 400, "ttl_seconds"},
		{"override ttl 31 days", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"ttl_seconds":2678400}`, nil, 400, "ttl_seconds"},
		{"override block with a limit", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"limit":5,"ttl_seconds":60}`, nil, 400, "limit"},
		{"override without a limit", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","window_seconds":60,"ttl_seconds":60}`, nil, 400, "limit"},
		{"override without a window", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","limit":60,"ttl_seconds":60}`, nil, 400, "window_seconds"},
		{"override limit over the algorithm's bound", "POST", "/api/v1/users/bob/override?dimension=ip", `{"rule_id":"ips","limit":100000,"window_seconds":60,"ttl_seconds":60}`, nil, 400, "limit"},
		{"override unknown field", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"ttl_seconds":60,"reason":"x"}`, nil, 400, "reason"},
		{"override no caller", "POST", "/api/v1/users/bob/override", `{"rule_id":"orders","block":true,"ttl_seconds":60}`, []string{"Authorization", ""}, 401, ""},
		{"override clear of none", "DELETE", "/api/v1/users/bob/override/orders", "", nil, 404, "rule"},
		{"override clear of another dimension", "DELETE", "/api/v1/users/alice/override/orders?dimension=ip", "", nil, 404, "rule"},
		{"override clear bad rule", "DELETE", "/api/v1/users/alice/override/a%20b", "", nil, 404, "rule"},
		{"audit since not a time", "GET", "/api/v1/audit?since=yesterday", "", nil, 400, "since"},
		{"audit until before since", "GET", "/api/v1/audit?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", nil, 400, "until"},
		{"audit order", "GET", "/api/v1/audit?order=sideways", "", nil, 400, "order"},
		{"audit bad cursor", "GET", "/api/v1/audit?cursor=%%%", "", nil, 400, "query"},
		{"audit cursor of the other order", "GET", "/api/v1/audit?order=newest&cursor=YTox", "", nil, 400, "cursor"},
		{"audit POST", "POST", "/api/v1/audit", `{}`, nil, 405, "method"},
	}
	require.GreaterOrEqual(t, len(cases), 40)
	audit, _, err := e.db.AuditQuery(e.ctx, rulesdbAll())
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.revision()
			hdr := append(e.auth("alice"), c.hdr...)
			if c.body != "" && !containsKey(c.hdr, "Content-Type") {
				hdr = append(js, hdr...)
			}
			hdr = dropEmpty(hdr)
			r := e.raw(c.method, c.path, c.body, hdr...)
			requireProblem(t, r, c.status, c.field)
			if c.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
			require.Equal(t, before, e.revision(), "a bad request changed the database")
		})
	}
	after, _, err := e.db.AuditQuery(e.ctx, rulesdbAll())
	require.NoError(t, err)
	require.Equal(t, len(audit), len(after), "no audit row for a refused request")
	require.Empty(t, e.logs.String(), "no bad request is logged as a failure")
}

func containsKey(hdr []string, k string) bool {
	for i := 0; i < len(hdr); i += 2 {
		if hdr[i] == k {
			return true
		}
	}
	return false
}

// dropEmpty removes the headers whose last value given is "" (a case
// removing a default).
func dropEmpty(hdr []string) []string {
	last := map[string]string{}
	for i := 0; i+1 < len(hdr); i += 2 {
		last[hdr[i]] = hdr[i+1]
	}
	var out []string
	seen := map[string]bool{}
	for i := len(hdr) - 2; i >= 0; i -= 2 {
		k := hdr[i]
		if seen[k] || last[k] == "" {
			continue
		}
		seen[k] = true
		out = append(out, k, last[k])
	}
	return out
}

// TestRefusalMessages: a refusal says what is wrong in the field's own
// terms, with the rule that conflicts for a 409.
func TestRefusalMessages(t *testing.T) {
	e := newEnv(t)
	r := e.req("POST", "/api/v1/rules", ordersRule)
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	for _, c := range []struct {
		body   string
		status int
		field  string
		msg    string
	}{
		{rule("endpoint_pattern", "api/x"), 400, "endpoint_pattern", `pattern "api/x" must start with /`},
		{rule("id", "zz", "endpoint_pattern", "/api/orders/**"), 409, "endpoint_pattern",
			`the rules would not load together: rule "zz": rule "orders" already has dimension "user" and endpoint_pattern "/api/orders/**" without a tier`},
		{rule("tier", "gold"), 409, "tier", `the rules would not load together: rule "new": no enabled rule without a tier has dimension "user" and endpoint_pattern "/api/new/**"`},
		{rule("burst", 3), 400, "burst", "fixed_window has no burst: leave it 0, got 3"},
	} {
		r := e.req("POST", "/api/v1/rules", c.body)
		requireProblem(t, r, c.status, c.field)
		require.Equal(t, c.msg, r.body["errors"].([]any)[0].(map[string]any)["message"], r.raw)
		require.Equal(t, c.field+": "+c.msg, r.body["detail"])
	}
}
