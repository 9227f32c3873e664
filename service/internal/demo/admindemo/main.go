// Command admindemo is `make admin-demo`: ratelimitd on one machine with
// its rules in SQLite, administered through its admin API. It creates a
// write token with `ratelimitd token create`, serves `ratelimitd serve
// --db file:<tmp>/rules.db` in its own process (the daemon serve runs) on
// loopback (127.0.0.1:8080 and :8081 when free, other free ports
// otherwise), creates a rule with POST /api/v1/rules, shows checks allowed
// then denied under it, changes it with PUT and If-Match (428 without),
// gives one user an override, prints the audit, the admin page's URL and
// the token, and stops everything. With ADMIN_DEMO_KEEP=1 it keeps serving
// until Ctrl-C, for a browser on /admin/. It exits non-zero when any step
// misbehaves.
//
//	cd service && go run ./internal/demo/admindemo -ratelimitd ../bin/ratelimitd
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/service/internal/demo"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

func main() {
	cfg := config{Timeout: 30 * time.Second, Keep: os.Getenv("ADMIN_DEMO_KEEP") == "1"}
	flag.StringVar(&cfg.Bin, "ratelimitd", "../bin/ratelimitd", "the ratelimitd binary (make ratelimitd builds it)")
	flag.Parse()
	cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	if free("127.0.0.1:8080") && free("127.0.0.1:8081") {
		cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:8080", "127.0.0.1:8081"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "admin-demo:", err)
		stop()
		os.Exit(1)
	}
}

// free reports whether addr can be listened on now.
func free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// config is what run needs.
type config struct {
	Bin                string        // the ratelimitd binary
	HTTPAddr, GRPCAddr string        // its listen addresses
	Timeout            time.Duration // bound on the demo's steps
	Keep               bool          // serve on until ctx ends
	// Kept, when not nil, is called once the demo has run with Keep set
	// and the service is left serving (tests use it).
	Kept func(c *demo.Client)
}

// The demo's rule.
const (
	ruleID   = "orders"
	endpoint = "/api/v1/orders"
)

func rule(limit int64) map[string]any {
	return map[string]any{"id": ruleID, "name": "orders per user", "dimension": "user", "endpoint_pattern": endpoint,
		"limit": limit, "window_seconds": 60, "algorithm": "token_bucket"}
}

// run is the demo; it writes what it does to w and returns the first step
// that misbehaved.
func run(ctx context.Context, w io.Writer, cfg config) (err error) {
	dir, err := os.MkdirTemp("", "sluice-admin-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	dsn := "file:" + filepath.Join(dir, "rules.db")
	steps, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s := &session{ctx: steps, w: w}

	s.say("== ratelimitd token create demo-admin --scope write --db %s", dsn)
	token, err := demo.CreateToken(steps, cfg.Bin, dsn, "demo-admin")
	if err != nil {
		return err
	}
	s.say("token (shown once, stored hashed): %s", token)
	d, err := serve(dsn, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if serr := demo.Stop(d); serr != nil {
			err = errors.Join(err, serr)
			return
		}
		s.say("ratelimitd stopped; %s removed", dir)
	}()
	s.say("== ratelimitd serve --db %s --http-addr %s --grpc-addr %s", dsn, d.HTTPAddr, d.GRPCAddr)
	s.say("serving: HTTP http://%s (check API, admin API, /admin/), gRPC %s", d.HTTPAddr, d.GRPCAddr)
	s.c = &demo.Client{Base: "http://" + d.HTTPAddr, Token: token}
	for _, step := range []func() error{s.createRule, s.changeRule, s.overrideCarol, s.showAudit} {
		if err := step(); err != nil {
			return fmt.Errorf("%w\nratelimitd's logs:\n%s", err, d.Logs())
		}
	}
	s.say("")
	s.say("Admin page: http://%s/admin/ (sign in with the token %s)", d.HTTPAddr, token)
	s.say("The rule's changes, field by field: http://%s/admin/audit?target=rule%%2F%s", d.HTTPAddr, ruleID)
	s.say("Traffic of these checks: http://%s/admin/traffic (allowed, warned, shadow-denied, denied per second and per minute; the callers throttled)", d.HTTPAddr)
	if cfg.Keep {
		s.say("ADMIN_DEMO_KEEP=1: serving until Ctrl-C")
		if cfg.Kept != nil {
			cfg.Kept(s.c)
		}
		<-ctx.Done()
	}
	return nil
}

// serve runs `ratelimitd serve --db dsn` on cfg's addresses, or on any
// free ones when those (free a moment ago) were taken since.
func serve(dsn string, cfg config) (*ratelimitdtest.Daemon, error) {
	d, err := demo.Serve("--db", dsn, "--http-addr", cfg.HTTPAddr, "--grpc-addr", cfg.GRPCAddr)
	if err != nil && cfg.HTTPAddr != "127.0.0.1:0" {
		d, err = demo.Serve("--db", dsn, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimitd serve: %w", err)
	}
	return d, nil
}

// session is the demo's state from one step to the next: where it writes,
// the client of the instance, and the rule's ETag as last answered.
type session struct {
	ctx  context.Context
	w    io.Writer
	c    *demo.Client
	etag string
}

func (s *session) say(format string, args ...any) { fmt.Fprintf(s.w, format+"\n", args...) }

// createRule creates the rule through the API (in force on the instance
// when it answers) and spends alice's checks under it.
func (s *session) createRule() error {
	s.say("")
	s.say(`== POST /api/v1/rules {"id":"orders","dimension":"user","endpoint_pattern":"/api/v1/orders","limit":3,"window_seconds":60,"algorithm":"token_bucket"}`)
	r, err := s.c.Expect(s.ctx, http.StatusCreated, http.MethodPost, "/api/v1/rules", rule(3), nil, nil)
	if err != nil {
		return err
	}
	s.etag = r.Header.Get("ETag")
	if err := s.c.Decides(s.ctx, "user", "demo-probe", endpoint, ruleID, 3); err != nil {
		return err
	}
	s.say("%d Created, Location %s, ETag %s; in force here when answered", r.Status, r.Header.Get("Location"), s.etag)
	return checks(s.ctx, s.w, s.c, "alice", 4, 3)
}

// changeRule changes the rule: refused without the ETag the client last
// saw (428) and with a stale one (412), done with the current one; then
// spends bob's checks under it.
func (s *session) changeRule() error {
	s.say("")
	s.say("== PUT /api/v1/rules/orders (limit 5) without If-Match")
	r, err := s.c.Expect(s.ctx, http.StatusPreconditionRequired, http.MethodPut, "/api/v1/rules/"+ruleID, rule(5), nil, nil)
	if err != nil {
		return err
	}
	s.say("%d Precondition Required: %s", r.Status, r.Problem())
	s.say("== PUT /api/v1/rules/orders (limit 5) with If-Match: %s", s.etag)
	r, err = s.c.Expect(s.ctx, http.StatusOK, http.MethodPut, "/api/v1/rules/"+ruleID, rule(5), map[string]string{"If-Match": s.etag}, nil)
	if err != nil {
		return err
	}
	if err := s.c.Decides(s.ctx, "user", "demo-probe", endpoint, ruleID, 5); err != nil {
		return err
	}
	s.say("%d OK, ETag %s; in force here when answered", r.Status, r.Header.Get("ETag"))
	s.say("== PUT again with the old If-Match: %s", s.etag)
	r, err = s.c.Expect(s.ctx, http.StatusPreconditionFailed, http.MethodPut, "/api/v1/rules/"+ruleID, rule(6), map[string]string{"If-Match": s.etag}, nil)
	if err != nil {
		return err
	}
	s.say("%d Precondition Failed: %s", r.Status, r.Problem())
	return checks(s.ctx, s.w, s.c, "bob", 6, 5)
}

// overrideCarol gives one user an override, carol 8 a minute for ten
// minutes, and spends her checks under it.
func (s *session) overrideCarol() error {
	s.say("")
	s.say(`== POST /api/v1/users/carol/override {"rule_id":"orders","limit":8,"window_seconds":60,"ttl_seconds":600}`)
	r, err := s.c.Expect(s.ctx, http.StatusCreated, http.MethodPost, "/api/v1/users/carol/override",
		map[string]any{"rule_id": ruleID, "limit": 8, "window_seconds": 60, "ttl_seconds": 600}, nil, nil)
	if err != nil {
		return err
	}
	if err := s.c.Decides(s.ctx, "user", "carol", endpoint, ruleID, 8); err != nil {
		return err
	}
	s.say("%d Created; in force here when answered (everyone else stays at 5)", r.Status)
	return checks(s.ctx, s.w, s.c, "carol", 9, 8)
}

// showAudit prints the audit: every change, with who made it.
func (s *session) showAudit() error {
	s.say("")
	s.say("== GET /api/v1/audit")
	rows, err := s.c.AuditRows(s.ctx)
	if err != nil {
		return err
	}
	s.say("%-4s %-20s %-12s %-14s %s", "rev", "at", "actor", "action", "target")
	for _, a := range rows {
		s.say("%-4d %-20s %-12s %-14s %s", a.Revision, a.At.UTC().Format(time.RFC3339), a.Actor, a.Action, a.Target)
		for _, c := range a.Changes {
			if c.Before != nil && c.After != nil && !slices.Contains([]string{"etag", "revision", "updated_at"}, c.Field) {
				s.say("     %s: %s → %s", c.Field, c.Before, c.After)
			}
		}
	}
	return auditHas(rows, "demo-admin", "rule/orders", "override/user/carol/orders")
}

// checks sends n checks of identifier and prints each decision; exactly
// the first allow are admitted, or it fails.
func checks(ctx context.Context, w io.Writer, c *demo.Client, identifier string, n, allow int) error {
	fmt.Fprintf(w, "== %d checks of user %s on %s: POST /api/v1/rate-limit/check {\"key_type\":\"user\",\"key_value\":%q,\"endpoint\":%q}\n",
		n, identifier, endpoint, identifier, endpoint)
	for i := range n {
		d, err := c.Check(ctx, "user", identifier, endpoint, 1)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%2d  %s\n", i+1, demo.Decision(d))
		if d.Allowed != (i < allow) {
			return fmt.Errorf("check %d of %s: allowed=%v, want %v (the limit is %d)", i+1, identifier, d.Allowed, i < allow, allow)
		}
		if d.Rule != ruleID {
			return fmt.Errorf("check %d of %s: decided by rule %q, want %q", i+1, identifier, d.Rule, ruleID)
		}
	}
	return nil
}

// auditHas fails unless rows hold an entry by actor for each target.
func auditHas(rows []demo.Audit, actor string, targets ...string) error {
	for _, t := range targets {
		found := false
		for _, a := range rows {
			found = found || (a.Actor == actor && a.Target == t)
		}
		if !found {
			return fmt.Errorf("the audit has no entry by %s for %s", actor, t)
		}
	}
	return nil
}
