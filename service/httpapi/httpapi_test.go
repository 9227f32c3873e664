package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/openapitest"
	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
	"github.com/sluicehq/sluice/service/rules"
)

// t0 is the tests' clock start: 30 s into a minute.
var t0 = time.Unix(1_800_000_030, 0)

type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// serve starts the handler on a real engine and memory store, on an HTTP
// server bound to loopback, behind the OpenAPI document's validator: every
// exchange of the test must match the document.
func serve(t *testing.T, opts ...httpapi.Option) (*httptest.Server, *clock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c := &clock{}
	c.ns.Store(t0.UnixNano())
	st, err := memorystore.New(memorystore.WithClock(c.now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(ctx, st, rules.NewFile("testdata/rules.yaml"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(httpapi.Path, httpapi.New(e, opts...))
	srv := httptest.NewServer(openapitest.New(t).Handler(t, mux))
	t.Cleanup(srv.Close)
	return srv, c
}

// memoryEngine is an engine on a memory store (real clock) under
// testdata/rules.yaml, for fuzzing and benchmarks.
func memoryEngine(tb testing.TB) *engine.Engine {
	tb.Helper()
	st, err := memorystore.New()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	e, err := engine.New(context.Background(), st, rules.NewFile("testdata/rules.yaml"))
	require.NoError(tb, err)
	return e
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	require.NoError(t, json.Unmarshal(raw, &out.body), "%s", raw)
	return out
}

func post(t *testing.T, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

func get(t *testing.T, url string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

const orders = `{"key_type":"user","key_value":"alice","endpoint":"/api/v1/orders"}`

// TestBodyMode: the default answers 200 with the decision in the body and
// the middleware's header fields, "allowed": false on a denial.
func TestBodyMode(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	for i := range 5 {
		r := post(t, url, orders)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, true, r.body["allowed"])
		require.Equal(t, float64(5), r.body["limit"])
		require.Equal(t, float64(4-i), r.body["remaining"])
		require.Equal(t, "2027-01-15T08:01:00Z", r.body["reset_at"])
		require.Equal(t, float64(0), r.body["retry_after"])
		require.Equal(t, "orders-per-user", r.body["rule"])
		require.Equal(t, `"orders-per-user";q=5;w=60`, r.header.Get("RateLimit-Policy"))
		require.Equal(t, `"orders-per-user";r=`+strconv.Itoa(4-i)+`;t=30`, r.header.Get("RateLimit"))
		require.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(4-i), r.header.Get("X-RateLimit-Remaining"))
		require.Equal(t, "1800000060", r.header.Get("X-RateLimit-Reset"))
		require.Empty(t, r.header.Get("Retry-After"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
	}
	r := post(t, url, orders)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, false, r.body["allowed"])
	require.Equal(t, float64(0), r.body["remaining"])
	require.Equal(t, float64(30), r.body["retry_after"])
	require.Equal(t, "throttled", r.body["state"])
	require.Equal(t, "30", r.header.Get("Retry-After"))
	require.Equal(t, "throttled", r.header.Get("X-RateLimit-State"))

	// Another user, and another endpoint (no rule: allowed, nothing counted).
	r = post(t, url, `{"key_type":"user","key_value":"bob","endpoint":"/api/v1/orders"}`)
	require.Equal(t, float64(4), r.body["remaining"])
	r = post(t, url, `{"key_type":"user","key_value":"alice","endpoint":"/elsewhere"}`)
	require.Equal(t, true, r.body["allowed"])
	require.Equal(t, "", r.body["rule"])
	require.Nil(t, r.body["reset_at"])
	require.Empty(t, r.header.Get("RateLimit"))
}

// TestPeekRuleAndCount: request_count 0 peeks, rule_id picks a rule, a cost
// above the capacity can never pass (retry_after null).
func TestPeekRuleAndCount(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	for range 3 {
		r := post(t, url, `{"key_type":"ip","key_value":"10.0.0.1","request_count":0}`)
		require.Equal(t, true, r.body["allowed"])
		require.Equal(t, float64(3), r.body["remaining"])
	}
	r := post(t, url, `{"key_type":"ip","key_value":"10.0.0.1","rule_id":"per-ip","request_count":2}`)
	require.Equal(t, float64(1), r.body["remaining"])
	require.Equal(t, "per-ip", r.body["rule"])
	r = post(t, url, `{"key_type":"ip","key_value":"10.0.0.1","request_count":2}`)
	require.Equal(t, false, r.body["allowed"])
	r = post(t, url, `{"key_type":"ip","key_value":"10.0.0.1","request_count":0}`)
	require.Equal(t, float64(1), r.body["remaining"], "the denial and the peeks consumed nothing")
	r = post(t, url, `{"key_type":"ip","key_value":"10.0.0.2","request_count":4}`)
	require.Equal(t, false, r.body["allowed"])
	require.Nil(t, r.body["retry_after"], "a cost above the capacity never passes")
	require.Empty(t, r.header.Get("Retry-After"))
}

// TestStatusMode: 429 + Retry-After on a denial, 200 when allowed, chosen by
// the query or for the whole handler, with GET and bodiless requests (nginx
// auth_request) reading query parameters or headers.
func TestStatusMode(t *testing.T) {
	srv, c := serve(t)
	url := srv.URL + httpapi.Path
	q := url + "?mode=status&key_type=ip&key_value=10.9.9.9"
	for range 3 {
		require.Equal(t, http.StatusOK, get(t, q).status)
	}
	r := get(t, q)
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "30", r.header.Get("Retry-After"))
	require.Equal(t, false, r.body["allowed"])
	r = get(t, q+"&deny_status=403")
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, "30", r.header.Get("Retry-After"))
	// The same denial in body mode.
	r = post(t, url, `{"key_type":"ip","key_value":"10.9.9.9"}`)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, false, r.body["allowed"])

	// Headers, and the endpoint from nginx's X-Original-URI.
	hdr := []string{"Sluice-Key-Type", "user", "Sluice-Key-Value", "carol", "X-Original-URI", "/api/v1/orders?page=2"}
	r = get(t, url+"?mode=status", hdr...)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "orders-per-user", r.body["rule"])
	require.Equal(t, float64(4), r.body["remaining"])
	// auth_request's subrequest keeps the original request's headers: a
	// JSON Content-Type with no body is read from the query and headers.
	req, err := http.NewRequest(http.MethodPost, url+"?mode=status", http.NoBody)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r = do(t, req)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, float64(3), r.body["remaining"])

	// The handler option: status mode for every request; ?mode=body opts out.
	srv2, _ := serve(t, httpapi.WithStatusMode(true), httpapi.WithDenyStatus(http.StatusForbidden))
	url2 := srv2.URL + httpapi.Path
	for range 3 {
		require.Equal(t, http.StatusOK, post(t, url2, `{"key_type":"ip","key_value":"1"}`).status)
	}
	require.Equal(t, http.StatusForbidden, post(t, url2, `{"key_type":"ip","key_value":"1"}`).status)
	require.Equal(t, http.StatusOK, post(t, url2+"?mode=body", `{"key_type":"ip","key_value":"1"}`).status)

	// A new window admits again.
	c.advance(30 * time.Second)
	require.Equal(t, http.StatusOK, get(t, q).status)
}

// TestProblems: bad input is RFC 9457 problem+json naming the field, and
// changes nothing.
func TestProblems(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	for _, tc := range []struct {
		name, body, ctype string
		status            int
		field             string
	}{
		{"unknown field", `{"key_type":"ip","key_value":"1","colour":"red"}`, "", 400, "colour"},
		{"wrong type", `{"key_type":"ip","key_value":1}`, "", 400, "key_value"},
		{"wrong count type", `{"key_type":"ip","key_value":"1","request_count":"2"}`, "", 400, "request_count"},
		{"fractional count", `{"key_type":"ip","key_value":"1","request_count":1.5}`, "", 400, "request_count"},
		{"huge count", `{"key_type":"ip","key_value":"1","request_count":1e30}`, "", 400, "request_count"},
		{"negative count", `{"key_type":"ip","key_value":"1","request_count":-1}`, "", 400, "request_count"},
		{"missing key_type", `{"key_value":"1"}`, "", 400, "key_type"},
		{"missing key_value", `{"key_type":"ip"}`, "", 400, "key_value"},
		{"long key_value", `{"key_type":"ip","key_value":"` + strings.Repeat("x", httpapi.MaxKeyValue+1) + `"}`, "", 400, "key_value"},
		{"unknown rule", `{"key_type":"ip","key_value":"1","rule_id":"nope"}`, "", 400, "rule_id"},
		{"rule of another dimension", `{"key_type":"user","key_value":"1","rule_id":"per-ip"}`, "", 400, "rule_id"},
		{"not an object", `[1,2]`, "", 400, "body"},
		{"malformed", `{"key_type":`, "", 400, "body"},
		{"trailing", `{"key_type":"ip","key_value":"1"} {}`, "", 400, "body"},
		{"deep", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), "", 400, "body"},
		{"too large", `{"key_type":"ip","key_value":"` + strings.Repeat("x", httpapi.MaxBody) + `"}`, "", 413, "body"},
		{"form", `key_type=ip`, "application/x-www-form-urlencoded", 415, "Content-Type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(tc.body))
			require.NoError(t, err)
			ct := tc.ctype
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			r := do(t, req)
			require.Equal(t, tc.status, r.status, r.raw)
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
			require.Equal(t, float64(tc.status), r.body["status"])
			require.Equal(t, tc.field, r.body["field"], r.raw)
			require.True(t, strings.HasPrefix(r.body["detail"].(string), tc.field+": "), r.raw)
			require.Empty(t, r.header.Get("RateLimit"))
		})
	}
	for _, tc := range []struct{ name, query, field string }{
		{"bad mode", "?mode=loud&key_type=ip&key_value=1", "mode"},
		{"bad deny status", "?mode=status&deny_status=500&key_type=ip&key_value=1", "deny_status"},
		{"unknown parameter", "?key_type=ip&key_value=1&kye=2", "kye"},
		{"bad count", "?key_type=ip&key_value=1&request_count=x", "request_count"},
		{"twice", "?key_type=ip&key_value=1&key_value=2", "key_value"},
		{"missing", "?mode=status", "key_type"},
	} {
		r := get(t, url+tc.query)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.name, r.raw)
		require.Equal(t, tc.field, r.body["field"], "%s: %s", tc.name, r.raw)
	}
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	require.NoError(t, err)
	r := do(t, req)
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, "GET, POST", r.header.Get("Allow"))

	// Nothing was counted by any of it.
	r = post(t, url, `{"key_type":"ip","key_value":"1","request_count":0}`)
	require.Equal(t, float64(3), r.body["remaining"])
}

// TestHostileBodies: random and adversarial bodies never crash the server,
// never answer 5xx, and always answer JSON.
func TestHostileBodies(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{`{`, `}`, `[`, `]`, `"key_type"`, `"key_value"`, `"request_count"`, `:`, `,`, `"ip"`, `1`, `-1`,
		`1e400`, `null`, `true`, `"\u0000"`, `"\ud800"`, "\xff", `"rule_id"`, `"endpoint"`, `"/a"`, ` `, `0.5`}
	for range 300 {
		var b bytes.Buffer
		for range rng.IntN(30) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		r := post(t, url, b.String())
		require.Less(t, r.status, 500, "%q: %s", b.String(), r.raw)
	}
}

// TestIdempotencyKey: a retried check with the same idempotency key is
// admitted without being counted again; another key is counted.
func TestIdempotencyKey(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	body := `{"key_type":"ip","key_value":"10.6.6.6","idempotency_key":"req-1"}`
	r := post(t, url, body)
	require.Equal(t, true, r.body["allowed"])
	require.Equal(t, float64(2), r.body["remaining"])
	for range 3 {
		r = post(t, url, body)
		require.Equal(t, true, r.body["allowed"])
	}
	r = post(t, url, `{"key_type":"ip","key_value":"10.6.6.6","request_count":0}`)
	require.Equal(t, float64(2), r.body["remaining"], "the retries were not counted")
	// Without a key in the query, the headers carry the check (a caller's
	// own GET, or a proxy setting every Sluice-* header).
	hdr := []string{"Sluice-Key-Type", "ip", "Sluice-Key-Value", "10.6.6.6", "Sluice-Idempotency-Key", "req-2"}
	r = get(t, url, hdr...)
	require.Equal(t, float64(1), r.body["remaining"])
	r = get(t, url, hdr...)
	require.Equal(t, float64(1), r.body["remaining"], "the retry was not counted")
	// With the key in the query, the header is the client's: ignored.
	for _, want := range []float64{0, 0} {
		r = get(t, url+"?key_type=ip&key_value=10.6.6.6", "Sluice-Idempotency-Key", "req-3")
		require.Equal(t, want, r.body["remaining"])
	}
	require.Equal(t, false, r.body["allowed"], "the repeat of a client's key was counted")
}

// TestInvalidUTF8InJSON: a JSON check whose text is not valid UTF-8 (any
// invalid sequence, or an unpaired surrogate escape) in any field, or in a
// member name, is 400 naming the field and counts nothing: decoded, it
// would have been U+FFFD, so "a\xff" and "a\xfe" would have spent one
// counter (that of "a\uFFFD"). The query and headers of a bodiless check
// carry an identifier's bytes as they are, so they are not refused.
func TestInvalidUTF8InJSON(t *testing.T) {
	srv, _ := serve(t)
	url := srv.URL + httpapi.Path
	fields := map[string]string{"key_type": "ip", "key_value": "a", "endpoint": "/api/v1/orders", "idempotency_key": "k", "rule_id": "per-ip"}
	for _, s := range append(append([]rawtexttest.Sample{}, rawtexttest.Invalid...), rawtexttest.Escapes...) {
		for f := range fields {
			body := "{"
			for g, v := range fields {
				if g == f {
					v = v + s.Bytes
				}
				body += `"` + g + `":"` + v + `",`
			}
			body += `"request_count":1}`
			r := post(t, url, body)
			require.Equal(t, http.StatusBadRequest, r.status, "%s in %s: %s", s.Name, f, r.raw)
			require.Equal(t, f, r.body["field"], "%s in %s: %s", s.Name, f, r.raw)
		}
		r := post(t, url, `{"key_type":"ip","key_value":"a","n`+s.Bytes+`":1}`)
		require.Equal(t, http.StatusBadRequest, r.status, "%s in a member name: %s", s.Name, r.raw)
		require.Equal(t, "body", r.body["field"], r.raw)
	}
	for _, id := range []string{"a", "a\uFFFD"} {
		r := post(t, url, `{"key_type":"ip","key_value":"`+id+`","request_count":0}`)
		require.Equal(t, float64(3), r.body["remaining"], "%q: nothing counted", id)
	}
	r := get(t, url+"?key_type=ip&key_value=a%FF")
	require.Equal(t, http.StatusOK, r.status, r.raw)
}
