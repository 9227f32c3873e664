package servicebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// HTTPCheckPath is ratelimitd's HTTP JSON check (service/httpapi's Path).
const HTTPCheckPath = "/api/v1/rate-limit/check"

// HTTPCheckBody is the JSON body of one HTTP check of identifier in
// dimension: the native check's fields under the HTTP API's names.
func HTTPCheckBody(dimension, identifier string) []byte {
	b, err := json.Marshal(struct {
		KeyType  string `json:"key_type"`
		KeyValue string `json:"key_value"`
		Endpoint string `json:"endpoint"`
	}{dimension, identifier, NativeEndpoint})
	if err != nil {
		panic(err) // three strings always marshal
	}
	return b
}

// httpDecider POSTs one JSON check per call to ratelimitd's HTTP API over
// keep-alive connections: at most one request in flight per HTTP/1.1
// connection, so one idle connection kept per caller.
type httpDecider struct {
	client *http.Client
	url    string
	bodies map[string][]byte // built once per user
	bufs   sync.Pool         // *bytes.Buffer for the answers
}

// NewHTTPDecider returns a redisbench.Decider that checks a user by POST
// http://addr/api/v1/rate-limit/check (dimension NativeDimension) for
// every user of users, from up to callers callers at once (PostCheck). The
// second value closes its idle connections.
func NewHTTPDecider(addr string, users []string, callers int) (redisbench.Decider, func()) {
	tr := &http.Transport{
		MaxIdleConns: callers, MaxIdleConnsPerHost: callers, MaxConnsPerHost: callers,
		IdleConnTimeout: time.Minute, DisableCompression: true, ForceAttemptHTTP2: false,
	}
	d := &httpDecider{
		client: &http.Client{Transport: tr, Timeout: CallTimeout},
		url:    "http://" + addr + HTTPCheckPath,
		bodies: make(map[string][]byte, len(users)),
	}
	d.bufs.New = func() any { return new(bytes.Buffer) }
	for _, u := range users {
		d.bodies[u] = HTTPCheckBody(NativeDimension, u)
	}
	return d, tr.CloseIdleConnections
}

var allowedTrue = []byte(`"allowed":true`)

func (d *httpDecider) Decide(ctx context.Context, user string) (bool, error) {
	body, ok := d.bodies[user]
	if !ok {
		return false, fmt.Errorf("user %q: not among the decider's users", user)
	}
	buf := d.bufs.Get().(*bytes.Buffer)
	defer d.bufs.Put(buf)
	return postCheck(ctx, d.client, d.url, body, buf)
}

// PostCheck POSTs one JSON check (body, as HTTPCheckBody makes it) to the
// HTTP API of the ratelimitd at addr and reports whether it was allowed.
func PostCheck(ctx context.Context, client *http.Client, addr string, body []byte) (bool, error) {
	return postCheck(ctx, client, "http://"+addr+HTTPCheckPath, body, new(bytes.Buffer))
}

// postCheck POSTs body to url, reading the answer into buf: allowed is a
// 200 answer whose JSON says "allowed": true.
func postCheck(ctx context.Context, client *http.Client, url string, body []byte, buf *bytes.Buffer) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	buf.Reset()
	// Read to the end: the connection is kept alive only then.
	if _, err := io.Copy(buf, io.LimitReader(resp.Body, 64<<10)); err != nil {
		return false, fmt.Errorf("POST %s: reading the answer: %w", HTTPCheckPath, err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("POST %s: %s: %s", HTTPCheckPath, resp.Status, bytes.TrimSpace(buf.Bytes()[:min(buf.Len(), 200)]))
	}
	return bytes.Contains(buf.Bytes(), allowedTrue), nil
}

func httpDeciderOf(c Conn) (redisbench.Decider, func(), error) {
	if c.HTTPAddr == "" {
		return nil, nil, fmt.Errorf("no HTTP address")
	}
	d, closeFn := NewHTTPDecider(c.HTTPAddr, c.Users, c.Callers)
	return d, closeFn, nil
}
