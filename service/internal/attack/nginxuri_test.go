//go:build linux

package attack

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/httpapi"
)

// frozenStack is startStack on a memory store and an engine whose clock
// stands still, so a window never ends during a test.
func frozenStack(t *testing.T, yaml string) *stack {
	t.Helper()
	at := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	now := func() time.Time { return at }
	store, err := memorystore.New(memorystore.WithClock(now))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	return startStack(t, store, yaml, engine.WithClock(now))
}

// hostPort is the host:port of an http:// base URL.
func hostPort(base string) string { return strings.TrimPrefix(base, "http://") }

const nginxLoginRules = `
rules:
  - name: login-per-client
    dimension: client
    endpoints: [/login]
    algorithm: fixed_window
    rate: 3
    period: 1h
  - name: api-per-client
    dimension: client
    endpoints: [/api/**]
    algorithm: fixed_window
    rate: 3
    period: 1h
`

// nginxLoginConf puts /login (exact) and /api/ (prefix) behind
// auth_request to ratelimitd at rl, the client named by its X-Client
// header; every other path is answered 404 "elsewhere" by nginx itself. The
// app behind is a second server on a unix socket answering "app".
const nginxLoginConf = `
server {
    listen {{listen}};
    location = /login {
        auth_request /ratelimit;
        error_page 403 = @ratelimited;
        proxy_pass http://unix:{{dir}}/app.sock;
    }
    location /api/ {
        auth_request /ratelimit;
        error_page 403 = @ratelimited;
        proxy_pass http://unix:{{dir}}/app.sock;
    }
    location / { return 404 "elsewhere\n"; }
    location = /ratelimit {
        internal;
        proxy_pass http://{{rl}}/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=client&key_value=$http_x_client;
        proxy_pass_request_body off;
        proxy_pass_request_headers off;
        proxy_set_header Content-Length "";
        proxy_set_header X-Original-URI $request_uri;
    }
    location @ratelimited { return 429 "limited\n"; }
}
server {
    listen unix:{{dir}}/app.sock;
    location / { return 200 "app\n"; }
}
`

// TestAttackNginxRawRequestLines: raw request lines that a real nginx
// routes to an exact location (= /login) or a prefix location (/api/)
// behind auth_request are counted there, whatever their spelling: the
// limit of 3 admits exactly 3, the 4th is 429. ratelimitd decides on
// X-Original-URI ($request_uri, as the client wrote it) and must
// normalize it exactly as nginx did before it matched the location:
// fragment dropped, percent-decoding (a decoded / and . act as such),
// slashes merged, dot segments resolved, query dropped, absolute form.
// Lines nginx refuses (400) or routes elsewhere are checked to be so, so
// that the table says what nginx does.
func TestAttackNginxRawRequestLines(t *testing.T) {
	s := frozenStack(t, nginxLoginRules)
	ngx := startNginx(t, strings.ReplaceAll(nginxLoginConf, "{{rl}}", hostPort(s.http)))
	const limited, elsewhere = 0, 404
	for i, tc := range []struct {
		target string
		want   int // limited: counted against the limit; else the status of every answer
	}{
		{"/login", limited},
		{"/login#x", limited},
		{"/login#", limited},
		{"/login#/../admin", limited},
		{"/login#%zz", limited},
		{"/login?x=1", limited},
		{"/login?x=1#y", limited},
		{"/login?", limited},
		{"/lo%67in", limited},
		{"/%6c%6F%67%69%6E", limited},
		{"//login", limited},
		{"///login", limited},
		{"/%2flogin", limited},
		{"/%2F%2Flogin", limited},
		{"/./login", limited},
		{"/%2e/login", limited},
		{"/a/../login", limited},
		{"/a/b/../../login", limited},
		{"/a/%2e%2e/login", limited},
		{"/a/.%2e/login", limited},
		{"/a/%2E./login", limited},
		{"/a%2f..%2flogin", limited},
		{"/a%2F%2E%2E%2Flogin", limited},
		{"/a/..%2flogin", limited},
		{"/a//../login", limited},
		{"/a/./../login", limited},
		{"/a/b/./.././../login", limited},
		{"/login/./../login", limited},
		{"/login/..//login", limited},
		{"/a/../login#x", limited},
		{"/login?x/../../y", limited},
		{"/a/..#x", elsewhere}, // "/"
		{"http://sluice.test/login", limited},
		{"HTTP://example.com:8080/login", limited},
		{"http://h//a/../login#x", limited},
		{"http://h/%6cogin?x", limited},
		{"/api/v1/orders", limited},
		{"//api//v1//orders", limited},
		{"/%61pi/v1/orders", limited},
		{"/api%2fv1/orders", limited},
		{"/api/v1/%2e%2e/orders", limited},
		{"/x/..%2fapi/v1", limited},
		{"/api/../api/x", limited},
		{"/api/x#y", limited},
		{"/api/x%23y", limited},
		{"/api/x%3fy", limited},
		{"/api/x%25y", limited},
		{"/api/x%0ay", limited},
		{"/api/x%20y", limited},
		{"/api/%c3%a9", limited},
		{"/api/\xc3\xa9", limited},
		{"/api/x;y", limited},
		{"/api/x\\y", limited},
		{"/api/.", limited},
		{"/api/", limited},
		{"/api/..", elsewhere},                // "/"
		{"/api/%2e%2e", elsewhere},            // "/"
		{"/login/", elsewhere},                // "/login/" is not = /login
		{"/login/.", elsewhere},               // "/login/"
		{"/login%23x", elsewhere},             // "/login#x"
		{"/login%3f", elsewhere},              // "/login?"
		{"/login%3Fx=1", elsewhere},           // "/login?x=1"
		{"/login%2f", elsewhere},              // "/login/"
		{"/login%20", elsewhere},              // "/login "
		{"/login;x", elsewhere},               // nginx keeps ;
		{"/LOGIN", elsewhere},                 // locations are case-sensitive
		{"/login.", elsewhere},                // a dot only ends a segment "."
		{"/logi%6e%2e", elsewhere},            // "/login."
		{"/login/..", elsewhere},              // "/"
		{"/..", 400},                          // above the root
		{"/../login", 400},                    // above the root
		{"/%2e%2e/login", 400},                // decoded, still above the root
		{"/.%2e/login", 400},                  // idem
		{"/a/../../login", 400},               // idem
		{"/login%00", 400},                    // a decoded NUL
		{"/login%", 400},                      // a broken escape
		{"/login%4", 400},                     // idem
		{"/login%zz", 400},                    // idem
		{"/lo%g1in", 400},                     // idem
		{"/login%2?x", 400},                   // idem, before the query
		{"login", 400},                        // no leading slash
		{"*", 400},                            // not an origin form
		{"/api", http.StatusMovedPermanently}, // nginx redirects to /api/
	} {
		client := "c" + strconv.Itoa(i)
		hdr := []string{"X-Client: " + client}
		if tc.want != limited {
			r := rawRequest(t, ngx.addr, "", http.MethodGet, tc.target, hdr, "")
			assert.Equal(t, tc.want, r.status, "GET %q: nginx answered %d %q (the table is wrong about nginx)", tc.target, r.status, r.body)
			continue
		}
		var got []int
		for range 4 {
			r := rawRequest(t, ngx.addr, "", http.MethodGet, tc.target, hdr, "")
			got = append(got, r.status)
			if r.status == http.StatusOK {
				assert.Equal(t, "app\n", r.body, "GET %q", tc.target)
			}
		}
		assert.Equal(t, []int{200, 200, 200, 429}, got, "GET %q: nginx routed it to a location limited to 3", tc.target)
	}
}

// uriRecorder is a Checker deciding on the engine that remembers the
// endpoint of the last check of each identifier.
type uriRecorder struct {
	httpapi.Checker
	mu   sync.Mutex
	seen map[string]string
}

func (r *uriRecorder) Check(ctx context.Context, c engine.Check) (engine.Result, error) {
	r.mu.Lock()
	r.seen[c.Identifier] = c.Endpoint
	r.mu.Unlock()
	return r.Checker.Check(ctx, c)
}

func (r *uriRecorder) endpoint(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.seen[id]
	return e, ok
}

// nginxEchoConf sends every request through auth_request to ratelimitd's
// handler at rl (the client named by X-Client), then to rl's /echo with
// nginx's $uri as the body, which /echo answers back.
const nginxEchoConf = `
server {
    listen {{listen}};
    {{merge}}
    location / {
        auth_request /ratelimit;
        set $echo /echo;
        proxy_method POST;
        proxy_set_body $uri;
        proxy_pass http://{{rl}}$echo;
    }
    location = /ratelimit {
        internal;
        proxy_pass http://{{rl}}/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=client&key_value=$http_x_client{{mergeArg}};
        proxy_pass_request_body off;
        proxy_pass_request_headers off;
        proxy_set_header Content-Length "";
        proxy_set_header X-Original-URI $request_uri;
    }
}
`

// TestAttackNginxURIAgreesWithNginx: for every line of a table and a few
// thousand random raw request lines (built from the bytes that matter: /
// . % # ? ; + \, hex digits, escapes of each, bytes over 0x7f, absolute
// forms), the endpoint ratelimitd's handler decides on (from
// X-Original-URI: $request_uri) equals nginx's own $uri, the path nginx
// matched its locations on, byte for byte; with merge_slashes on
// (nginx's default) and off (merge_slashes=off in the check's query). A
// line nginx accepts is never refused by ratelimitd either.
func TestAttackNginxURIAgreesWithNginx(t *testing.T) {
	for _, merge := range []bool{true, false} {
		t.Run("merge_slashes="+map[bool]string{true: "on", false: "off"}[merge], func(t *testing.T) {
			rec := &uriRecorder{seen: map[string]string{}}
			s := frozenStack(t, nginxLoginRules)
			rec.Checker = s.eng
			mux := http.NewServeMux()
			mux.Handle(httpapi.Path, httpapi.New(rec))
			mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
			rl := httptest.NewServer(mux)
			t.Cleanup(rl.Close)
			conf := strings.NewReplacer("{{rl}}", hostPort(rl.URL), "{{merge}}", "", "{{mergeArg}}", "").Replace(nginxEchoConf)
			if !merge {
				conf = strings.NewReplacer("{{rl}}", hostPort(rl.URL), "{{merge}}", "merge_slashes off;", "{{mergeArg}}", "&merge_slashes=off").Replace(nginxEchoConf)
			}
			ngx := startNginx(t, conf)
			seed := uint64(time.Now().UnixNano())
			t.Logf("random targets from seed %d", seed)
			targets := append(uriTable(), randomTargets(rand.New(rand.NewPCG(1, seed)), 3000)...)
			compareWithNginx(t, ngx, rec, targets)
		})
	}
}

// compareWithNginx sends every target through ngx and fails on each one
// nginx accepted where ratelimitd decided on another endpoint than $uri
// (or refused it).
func compareWithNginx(t *testing.T, ngx *nginxProc, rec *uriRecorder, targets []string) {
	t.Helper()
	var mu sync.Mutex
	var bad []string
	accepted := 0
	parallel(len(targets), 4, func(i int) {
		target := targets[i]
		client := "t" + strconv.Itoa(i)
		r, err := sendRaw(ngx.addr, "", http.MethodGet, target, []string{"X-Client: " + client}, "")
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad = append(bad, fmt.Sprintf("%q: %v", target, err))
			return
		}
		got, checked := rec.endpoint(client)
		switch {
		case r.status == http.StatusOK && !checked:
			bad = append(bad, fmt.Sprintf("%q: nginx answered 200 without a check", target))
		case r.status == http.StatusOK:
			accepted++
			if got != r.body {
				bad = append(bad, fmt.Sprintf("%q: nginx $uri %q, ratelimitd decided on %q", target, r.body, got))
			}
		case r.status == http.StatusBadRequest && !checked:
			// nginx refused the line: nothing reached ratelimitd.
		default:
			bad = append(bad, fmt.Sprintf("%q: nginx answered %d %q (a check was made: %v, endpoint %q)", target, r.status, r.body, checked, got))
		}
	})
	require.Empty(t, bad, "%d of %d targets disagree (%d accepted by nginx)", len(bad), len(targets), accepted)
	require.Greater(t, accepted, len(targets)/3, "too few targets accepted by nginx to compare")
	t.Logf("%d targets, %d accepted by nginx, all decided on nginx's $uri", len(targets), accepted)
}

// uriTable is the hand-written targets of the comparison: every class of
// TestAttackNginxRawRequestLines and the corners of nginx's parser.
func uriTable() []string {
	return []string{
		"/", "/login", "/login#x", "/lo%67in", "//login", "/a/../login", "/login/.", "/%2e%2e/login",
		"/a/%2e%2e/login", "/a%2flogin", "/a%2f..%2flogin", "/%25", "/%23x", "/%3fx", "/%3Fx", "/%00", "/%0",
		"/%zz", "/..", "/a/..", "http://h/p?x", "http://h?x", "http://h", "http://h:80", "http://h//a/../b",
		"HTTP://h:80/a", "/a/.?x", "/a/..#x", "/..%3F", "/a#%zz", "/a?%zz", "/a%0ab", "/x/%2e%2e%2flogin",
		"/%2E", "/a/b/../../..", "/a//../b", "/a%3F/..", "/a%2F%2E%2E", "/.%2e", "/a/.%2e/b", "/a+b",
		"/%c3%a9", "/\xc3\xa9", "/\xff", "/a\\b", "/a%5c..%5cb", "/a;b/../c", "/..;/x", "//..", "//../..",
		"/a//b/../c", "/a%2f%2f..", "/a//", "//", "///", "/.", "/./", "/..a", "/a..", "/a/.b/..", "/%2e",
		"/%2e%2e", "/%2e%2e%2f", "/a/%2e%2e%2f", "/%", "/%2", "/a%", "/%%", "/%2%", "/%%2e", "/%252e%252e/",
		"/a?b?c", "/a#b#c", "/a#b?c", "/a?b#c", "/%3f%23%25", "/a%2f", "/a%2F/", "/a/b%2f..", "/a/b/%2e%2e/%2e%2e",
		"/a/b/%2e%2e/%2e%2e/%2e%2e", "/~user/./x", "/a&b=c", "/a=b", "/a:b", "/a@b", "/a!$'()*,", "/{|}^`\"<>",
		"/a%7e", "/%7E", "/%41%42", "/%e2%80%ae", "/a\x80\x81",
	}
}

// uriTokens are the pieces random targets are made of: path structure,
// escapes of it, of the characters nginx treats specially, of the broken
// kind, and ordinary characters.
var uriTokens = []string{
	"/", "/", "/", "/", ".", ".", "..", "%", "%2e", "%2E", "%2f", "%2F", "%23", "%25", "%3f", "%3F", "%00",
	"%0a", "%0d", "%20", "%09", "%41", "%6c", "%61", "%c3%a9", "%5c", "%2b", "%3b", "%zz", "%2", "%g0", "#", "?",
	";", "+", "a", "b", "F", "f", "0", "9", "login", "api", "\\", "~", "&", "=", ":", "@", "!", "$", "'", "*",
	",", "\xc3\xa9", "\xff", "\x80", "{", "|", "\"", "<", ">", "^", "`",
}

// randomTargets returns n random request targets: most in origin form, some
// in absolute form (with and without a path, with a port).
func randomTargets(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		switch rng.IntN(10) {
		case 0:
			b.WriteString("http://h")
		case 1:
			b.WriteString("http://example.com:8080")
		}
		if b.Len() == 0 || rng.IntN(4) != 0 {
			b.WriteString("/")
		}
		for range 1 + rng.IntN(12) {
			b.WriteString(uriTokens[rng.IntN(len(uriTokens))])
		}
		out[i] = b.String()
	}
	return out
}
