// Package demo holds what the programs of `make admin-demo` (admindemo)
// and `make fleet-demo` (fleetdemo) share: ratelimitd served in the
// demo's own process (Serve, Stop), a client of its admin API
// (/api/v1/rules, /users, /audit with a bearer token) and of its HTTP
// check API (/api/v1/rate-limit/check), `ratelimitd token create`, and
// waiting until an instance decides under a given limit. Nothing is
// mocked: the demos run the daemon `ratelimitd serve` runs, the binary's
// token command, a real database and Redis.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

// Client speaks to one ratelimitd instance over HTTP: the admin API with
// Token, and the check API (unauthenticated).
type Client struct {
	// Base is the instance's HTTP listener, "http://127.0.0.1:8080".
	Base string
	// Token is the admin API's bearer token.
	Token string
	// HTTP is the client used; nil means one with a 5 s timeout.
	HTTP *http.Client
}

// Response is an answer of the admin API.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Problem is the detail of an RFC 9457 problem+json body, "" when the
// body is not one.
func (r Response) Problem() string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(r.Body, &p) != nil {
		return ""
	}
	if p.Detail == "" {
		return p.Title
	}
	return p.Detail
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 5 * time.Second}
}

// Do sends method path (below Base) with body as JSON (nil: no body) and
// the extra header fields, with the bearer token, and returns the answer.
func (c *Client) Do(ctx context.Context, method, path string, body any, header map[string]string) (Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Response{}, fmt.Errorf("%s %s: encoding the body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Expect is Do that fails unless the answer's status is want, and decodes
// a JSON body into out (when out is not nil).
func (c *Client) Expect(ctx context.Context, want int, method, path string, body any, header map[string]string, out any) (Response, error) {
	r, err := c.Do(ctx, method, path, body, header)
	if err != nil {
		return r, err
	}
	if r.Status != want {
		return r, fmt.Errorf("%s %s: status %d, want %d: %s", method, path, r.Status, want, strings.TrimSpace(string(r.Body)))
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			return r, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return r, nil
}

// Check sends one check of cost (0 peeks: nothing is consumed) to the HTTP
// check API, POST /api/v1/rate-limit/check.
func (c *Client) Check(ctx context.Context, dimension, identifier, endpoint string, cost int64) (httpapi.Response, error) {
	body := httpapi.Request{KeyType: dimension, KeyValue: identifier, Endpoint: endpoint, RequestCount: &cost}
	b, err := json.Marshal(body)
	if err != nil {
		return httpapi.Response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+"/api/v1/rate-limit/check", bytes.NewReader(b))
	if err != nil {
		return httpapi.Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		return httpapi.Response{}, fmt.Errorf("check %s: %w", identifier, err)
	}
	defer func() { _ = resp.Body.Close() }()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpapi.Response{}, fmt.Errorf("check %s: %w", identifier, err)
	}
	if resp.StatusCode != http.StatusOK {
		return httpapi.Response{}, fmt.Errorf("check %s: status %d: %s", identifier, resp.StatusCode, strings.TrimSpace(string(rb)))
	}
	var out httpapi.Response
	if err := json.Unmarshal(rb, &out); err != nil {
		return out, fmt.Errorf("check %s: decoding the answer: %w", identifier, err)
	}
	return out, nil
}

// Decision is one line of a demo's output for a check: "allowed  rule=orders
// limit=3  remaining=2" or "denied   rule=orders  limit=3  remaining=0
// retry_after=19.9s".
func Decision(r httpapi.Response) string {
	verdict := "allowed"
	if !r.Allowed {
		verdict = "denied "
	}
	s := fmt.Sprintf("%s  rule=%s  limit=%d  remaining=%d", verdict, r.Rule, r.Limit, r.Remaining)
	if !r.Allowed && r.RetryAfter != nil {
		s += fmt.Sprintf("  retry_after=%.1fs", *r.RetryAfter)
	}
	return s
}

// WaitLimit peeks (consuming nothing) at identifier's check on endpoint
// every 5 ms until the instance decides it under rule with limit, and
// returns how long that took; it gives up when ctx ends.
func (c *Client) WaitLimit(ctx context.Context, dimension, identifier, endpoint, rule string, limit int64) (time.Duration, error) {
	start := time.Now()
	var last httpapi.Response
	var lastErr error
	for {
		last, lastErr = c.Check(ctx, dimension, identifier, endpoint, 0)
		if lastErr == nil && last.Rule == rule && last.Limit == limit {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return 0, fmt.Errorf("%s never decided under rule %s with limit %d: %w", c.Base, rule, limit, lastErr)
			}
			return 0, fmt.Errorf("%s never decided under rule %s with limit %d (last: rule %q, limit %d): %w", c.Base, rule, limit, last.Rule, last.Limit, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Decides peeks (consuming nothing) once at identifier's check on endpoint
// and fails unless the instance decides it under rule with limit: an
// admin write is in force on the instance that answered it.
func (c *Client) Decides(ctx context.Context, dimension, identifier, endpoint, rule string, limit int64) error {
	r, err := c.Check(ctx, dimension, identifier, endpoint, 0)
	if err != nil {
		return err
	}
	if r.Rule != rule || r.Limit != limit {
		return fmt.Errorf("%s decided under rule %q with limit %d, not rule %s with limit %d, right after the write's answer", c.Base, r.Rule, r.Limit, rule, limit)
	}
	return nil
}

// CreateToken runs `bin token create NAME --scope write --db DSN` and
// returns the secret it prints.
func CreateToken(ctx context.Context, bin, dsn, name string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "token", "create", name, "--scope", "write", "--db", dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ratelimitd token create: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	secret := strings.TrimSpace(string(out))
	if secret == "" || strings.ContainsAny(secret, " \n") {
		return "", errors.New("ratelimitd token create: no secret printed")
	}
	return secret, nil
}

// Audit is one row of GET /api/v1/audit as the demos print it.
type Audit struct {
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
	Actor    string    `json:"actor"`
	Action   string    `json:"action"`
	Target   string    `json:"target"`
	// Changes are what the entry changed, member by member.
	Changes []struct {
		Field  string          `json:"field"`
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	} `json:"changes"`
}

// AuditRows reads the audit, oldest first (at most 100 entries).
func (c *Client) AuditRows(ctx context.Context) ([]Audit, error) {
	var page struct {
		Entries []Audit `json:"entries"`
	}
	if _, err := c.Expect(ctx, http.StatusOK, http.MethodGet, "/api/v1/audit?limit=100", nil, nil, &page); err != nil {
		return nil, err
	}
	return page.Entries, nil
}

// Serve runs `ratelimitd serve args...` in the demo's process (the flags
// completed by ratelimitdtest.ServeArgs: JSON logs kept, loopback ports
// the kernel picks unless args give others, no drain delay) and returns
// once it serves, or an error with its logs. Stop ends it.
func Serve(args ...string) (*ratelimitdtest.Daemon, error) {
	c, err := ratelimitdtest.Config(args...)
	if err != nil {
		return nil, fmt.Errorf("ratelimitd serve %s: %w", strings.Join(args, " "), err)
	}
	return ratelimitdtest.LaunchDaemon(c)
}

// Stop drains and stops a ratelimitd the demo started with Serve; a
// failure is an error carrying its logs.
func Stop(d *ratelimitdtest.Daemon) error {
	if err := d.Close(); err != nil {
		return fmt.Errorf("stopping ratelimitd: %w; logs:\n%s", err, d.Logs())
	}
	return nil
}
