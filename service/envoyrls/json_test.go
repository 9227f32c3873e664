package envoyrls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/service/envoyrls"
	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
)

type jsonReply struct {
	status int
	header http.Header
	raw    []byte
}

func postJSON(t *testing.T, url, method, body string) jsonReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return jsonReply{status: res.StatusCode, header: res.Header, raw: raw}
}

// problemOf decodes a problem+json answer.
func problemOf(t *testing.T, r jsonReply) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%s", r.raw)
	var p map[string]any
	require.NoError(t, json.Unmarshal(r.raw, &p))
	require.Equal(t, float64(r.status), p["status"])
	return p
}

// TestJSONEndpoint: envoyproxy/ratelimit's /json, on the same decisions:
// 200 while allowed, 429 over limit, the response in proto3 JSON.
func TestJSONEndpoint(t *testing.T) {
	r := start(t, enRules(t))
	srv := httptest.NewServer(r.server.JSONHandler())
	t.Cleanup(srv.Close)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.7.7.7"}]}]}`
	camel := `{"domain":"edge","hitsAddend":1,"descriptors":[{"entries":[{"key":"remote_address","value":"10.7.7.7"}]}]}`
	for i := range 5 {
		b := body
		if i%2 == 1 {
			b = camel
		}
		res := postJSON(t, srv.URL, http.MethodPost, b)
		require.Equal(t, http.StatusOK, res.status, "%s", res.raw)
		require.Equal(t, "application/json", res.header.Get("Content-Type"))
		var out rlsv3.RateLimitResponse
		require.NoError(t, protojson.Unmarshal(res.raw, &out))
		require.Equal(t, rlsv3.RateLimitResponse_OK, out.GetOverallCode())
		require.Equal(t, uint32(4-i), out.GetStatuses()[0].GetLimitRemaining())
		require.Equal(t, rlsv3.RateLimitResponse_RateLimit_MINUTE, out.GetStatuses()[0].GetCurrentLimit().GetUnit())
		require.NotEmpty(t, res.header.Get("RateLimit"))
	}
	res := postJSON(t, srv.URL, http.MethodPost, body)
	require.Equal(t, http.StatusTooManyRequests, res.status)
	var out rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(res.raw, &out))
	require.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, out.GetOverallCode())
	require.Equal(t, "30", res.header.Get("Retry-After"))
	require.Contains(t, string(res.raw), `"overallCode":"OVER_LIMIT"`)

	for _, tc := range []struct {
		name, method, body string
		status             int
		detail             string
	}{
		{"get", http.MethodGet, "", 405, ""},
		{"malformed", http.MethodPost, `{"domain":`, 400, "body: "},
		{"unknown field", http.MethodPost, `{"domain":"edge","colour":1}`, 400, "colour"},
		{"wrong type", http.MethodPost, `{"domain":7}`, 400, "body: "},
		{"no domain", http.MethodPost, `{"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, 400, "domain: "},
		{"no descriptors", http.MethodPost, `{"domain":"edge","descriptors":[]}`, 400, "descriptors: "},
		{"too large", http.MethodPost, `{"domain":"` + strings.Repeat("x", envoyrls.MaxJSONBody) + `"}`, 413, "body: "},
		{"deep", http.MethodPost, `{"domain":"edge","x":` + strings.Repeat("[", 40000) + strings.Repeat("]", 40000) + `}`, 413, "body: "},
		{"deep small", http.MethodPost, `{"domain":"edge","x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`, 400, "body: "},
		{"deep known", http.MethodPost, `{"domain":"edge","descriptors":` + strings.Repeat("[", 30000) + `}`, 400, "body: "},
	} {
		res := postJSON(t, srv.URL, tc.method, tc.body)
		require.Equal(t, tc.status, res.status, "%s: %s", tc.name, res.raw)
		p := problemOf(t, res)
		require.Contains(t, p["detail"], tc.detail, tc.name)
	}
	// None of that counted anything.
	res = postJSON(t, srv.URL, http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.7.7.8"}]}]}`)
	require.NoError(t, protojson.Unmarshal(res.raw, &out))
	require.Equal(t, uint32(4), out.GetStatuses()[0].GetLimitRemaining())
}

// TestJSONInvalidUTF8: a /json request with text that is not valid UTF-8
// (every invalid sequence, every unpaired surrogate escape) in its domain,
// a descriptor's key or value, or a member name, is 400 naming the field,
// and counts nothing.
func TestJSONInvalidUTF8(t *testing.T) {
	r := start(t, enRules(t))
	srv := httptest.NewServer(r.server.JSONHandler())
	t.Cleanup(srv.Close)
	body := func(domain, key, value string) string {
		return `{"domain":"` + domain + `","descriptors":[{"entries":[{"key":"` + key + `","value":"` + value + `"}]}]}`
	}
	for _, s := range append(append([]rawtexttest.Sample{}, rawtexttest.Invalid...), rawtexttest.Escapes...) {
		for field, b := range map[string]string{
			"domain":                          body("edge"+s.Bytes, "remote_address", "10.7.7.7"),
			"descriptors[0].entries[0].key":   body("edge", "remote_address"+s.Bytes, "10.7.7.7"),
			"descriptors[0].entries[0].value": body("edge", "remote_address", "10.7.7.7"+s.Bytes),
			"descriptors[0].entries[0]":       `{"domain":"edge","descriptors":[{"entries":[{"k` + s.Bytes + `":1}]}]}`,
		} {
			res := postJSON(t, srv.URL, http.MethodPost, b)
			require.Equal(t, http.StatusBadRequest, res.status, "%s in %s: %s", s.Name, field, res.raw)
			require.True(t, strings.HasPrefix(problemOf(t, res)["detail"].(string), field+": "), "%s in %s: %s", s.Name, field, res.raw)
		}
	}
	res := postJSON(t, srv.URL, http.MethodPost, body("edge", "remote_address", "10.7.7.7"))
	var out rlsv3.RateLimitResponse
	require.NoError(t, protojson.Unmarshal(res.raw, &out))
	require.Equal(t, uint32(4), out.GetStatuses()[0].GetLimitRemaining(), "nothing counted")
}

// TestJSONHostileBodies: random and adversarial bodies never crash the
// server nor answer 5xx, and every error is problem+json.
func TestJSONHostileBodies(t *testing.T) {
	r := start(t, enRules(t))
	srv := httptest.NewServer(r.server.JSONHandler())
	t.Cleanup(srv.Close)
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{`{`, `}`, `[`, `]`, `"domain"`, `"edge"`, `"descriptors"`, `"entries"`, `"key"`, `"value"`,
		`"hitsAddend"`, `"hits_addend"`, `"isNegativeHits"`, `:`, `,`, `1`, `-1`, `4294967296`, `"18446744073709551615"`,
		`1e400`, `null`, `true`, `"\u0000"`, `"\ud800"`, "\xff", ` `, `0.5`}
	for range 300 {
		var b bytes.Buffer
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		res := postJSON(t, srv.URL, http.MethodPost, b.String())
		require.Less(t, res.status, 500, "%q: %s", b.String(), res.raw)
		if res.status >= 400 && res.status != 429 {
			problemOf(t, res)
		}
	}
}
