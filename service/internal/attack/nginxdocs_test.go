//go:build linux

package attack

import (
	"fmt"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docNginx is one nginx configuration of the documentation.
type docNginx struct {
	where string // file:line
	conf  string
}

// nginxFence opens a Markdown code block; its language is the third group.
var nginxFence = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})[ \t]*([^ \t`]*)")

// markdownNginx returns the ```nginx blocks of a Markdown text, as
// examples/readme_test.go extracts the ```go ones.
func markdownNginx(t *testing.T, name string) []docNginx {
	t.Helper()
	text, err := os.ReadFile(name)
	require.NoError(t, err)
	lines := strings.Split(string(text), "\n")
	var out []docNginx
	for i := 0; i < len(lines); i++ {
		m := nginxFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, fence, lang, start := m[1], m[2], m[3], i
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, fence) && strings.Trim(l, fence[:1]) == "" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		require.True(t, closed, "%s:%d: code block never closed", name, start+1)
		if lang == "nginx" {
			out = append(out, docNginx{where: fmt.Sprintf("%s:%d", strings.TrimLeft(name, "./"), start+1), conf: strings.Join(body, "\n")})
		}
	}
	return out
}

// goDocNginx returns the code blocks of a Go file's package comment that
// hold nginx locations.
func goDocNginx(t *testing.T, name string) []docNginx {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "%s has no package comment", name)
	var out []docNginx
	for _, b := range new(comment.Parser).Parse(f.Doc.Text()).Content {
		if c, ok := b.(*comment.Code); ok && strings.Contains(c.Text, "location ") {
			out = append(out, docNginx{where: strings.TrimLeft(name, "./") + " package comment", conf: c.Text})
		}
	}
	return out
}

// The documented configurations name ratelimitd at 127.0.0.1:8080 and the
// app as the upstream "app"; the test puts its own addresses there and
// changes nothing else.
const (
	docRatelimitd = "127.0.0.1:8080"
	docApp        = "http://app"
)

const nginxDocRules = `
rules:
  - name: orders-per-ip
    dimension: ip
    endpoints: [/api/v1/orders]
    algorithm: fixed_window
    rate: 3
    period: 1m
  - name: other-per-ip
    dimension: ip
    endpoints: [/other/**]
    algorithm: fixed_window
    rate: 1000
    period: 1m
  - name: per-user
    dimension: user
    algorithm: fixed_window
    rate: 1000
    period: 1m
`

// docAttack is what a client sends to try to escape its limit: extra
// header lines, a body, and the targets it cycles through.
type docAttack struct {
	name    string
	headers []string
	body    string
	targets []string
}

// hostileTargets are raw spellings of /api/v1/orders (and /api/v1/orders/,
// which the rule's pattern matches too) that nginx routes to location
// /api/.
var hostileTargets = []string{
	"/api/v1/orders", "/api/v1/orders#x", "//api/v1/orders", "/%61pi/v1/orders", "/api/v1/x/../orders",
	"/x/../api/v1/orders", "/api/v1/orders?x=1#y", "http://h/api/v1/orders", "/api/v1/%2e%2e/v1/orders",
	"/api%2fv1/orders", "/api/v1/orders/.", "/./api/v1/orders",
}

func docAttacks() []docAttack {
	every := []string{
		"Sluice-Idempotency-Key: same", "Idempotency-Key: same", "Sluice-Request-Count: 0",
		"Sluice-Endpoint: /nothing", "Sluice-Rule-Id: other-per-ip", "Sluice-Key-Type: user",
		"Sluice-Key-Value: someone-else", "Sluice-Key-Value: 10.9.9.9", "X-Original-URI: /nothing",
	}
	out := []docAttack{{name: "none"}}
	for _, h := range every {
		out = append(out, docAttack{name: h, headers: []string{h}})
	}
	return append(out,
		docAttack{name: "every header", headers: every},
		docAttack{name: "hostile raw URIs", targets: hostileTargets},
		docAttack{name: "hostile raw URIs and every header", headers: every, targets: hostileTargets},
		docAttack{name: "JSON body", headers: []string{"Content-Type: application/json"},
			body: `{"key_type":"ip","key_value":"10.9.9.9","request_count":0}`},
	)
}

// TestAttackNginxDocsConfigs runs every nginx configuration of
// docs/service.md and of httpapi's package documentation, verbatim but for
// the addresses of ratelimitd and the app, in a real nginx in front of
// ratelimitd, and attacks it: a client repeating one idempotency key,
// sending its own Sluice-Key-*, Sluice-Rule-Id, Sluice-Endpoint,
// Sluice-Request-Count: 0 or X-Original-URI, a JSON body of its own
// check, or hostile raw spellings of the limited path. A limit of 3 a
// minute admits exactly 3 of 12 requests, whatever the client sends, and
// the 9 others are 429 with Retry-After.
func TestAttackNginxDocsConfigs(t *testing.T) {
	confs := markdownNginx(t, "../../../docs/service.md")
	require.NotEmpty(t, confs, "docs/service.md has no ```nginx block")
	fromGo := goDocNginx(t, "../../httpapi/doc.go")
	require.NotEmpty(t, fromGo, "httpapi/doc.go shows no nginx configuration")
	for _, d := range append(confs, fromGo...) {
		t.Run(d.where, func(t *testing.T) { attackDocConfs(t, d.conf) })
		// A configuration that keeps the key in the query holds even if
		// it forwarded the client's headers: ratelimitd reads none then.
		if forwarding := strings.Replace(d.conf, "proxy_pass_request_headers off;", "", 1); forwarding != d.conf && !strings.Contains(d.conf, "Sluice-Key") {
			t.Run(d.where+" forwarding the client's headers", func(t *testing.T) { attackDocConfs(t, forwarding) })
		}
	}
}

// attackDocConfs runs the nginx locations conf in front of ratelimitd and
// tries every docAttack on it, each from its own client address.
func attackDocConfs(t *testing.T, conf string) {
	t.Helper()
	require.Contains(t, conf, docRatelimitd, "the configuration does not name ratelimitd at %s", docRatelimitd)
	require.Contains(t, conf, docApp, "the configuration does not proxy to %s", docApp)
	s := frozenStack(t, nginxDocRules)
	conf = strings.NewReplacer(docRatelimitd, hostPort(s.http), docApp, "http://unix:{{dir}}/app.sock").Replace(conf)
	ngx := startNginx(t, "server {\n    listen {{listen}};\n"+conf+"\n}\n"+
		"server {\n    listen unix:{{dir}}/app.sock;\n    location / { return 200 \"app\\n\"; }\n}\n")
	for i, a := range docAttacks() {
		from := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250) // one client address per attack
		admitted, denied := attackDocConf(t, ngx, from, a)
		assert.Equal(t, 3, admitted, "%s: %d of 12 admitted past a limit of 3", a.name, admitted)
		assert.Equal(t, 9, denied, "%s: %d of 12 denied", a.name, denied)
	}
}

// attackDocConf sends 12 requests of attack a from address from and counts
// the admitted (the app's answer) and the denied (429 with Retry-After).
func attackDocConf(t *testing.T, ngx *nginxProc, from string, a docAttack) (admitted, denied int) {
	t.Helper()
	method := http.MethodGet
	if a.body != "" {
		method = http.MethodPost
	}
	for i := range 12 {
		target := "/api/v1/orders"
		if len(a.targets) > 0 {
			target = a.targets[i%len(a.targets)]
		}
		r := rawRequest(t, ngx.addr, from, method, target, a.headers, a.body)
		switch {
		case r.status == http.StatusOK && r.body == "app\n":
			admitted++
		case r.status == http.StatusTooManyRequests:
			assert.NotEmpty(t, r.header.Get("Retry-After"), "%s: a 429 without Retry-After", a.name)
			denied++
		default:
			t.Errorf("%s: %s %q: %d %q", a.name, method, target, r.status, r.body)
		}
	}
	return admitted, denied
}
