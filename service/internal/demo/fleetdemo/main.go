// Command fleetdemo is `make fleet-demo`: ratelimitd as a fleet, its rules
// in PostgreSQL and its counters in Redis. It starts a throwaway
// PostgreSQL (initdb in a temporary directory, postgres on a free loopback
// port, as the service's tests do: pgtest.Launch) and redis-server on a
// free loopback port (redistest.Launch), creates a write token with
// `ratelimitd token create`, serves two instances A and B of `ratelimitd
// serve --db postgres://… --redis redis://… --rules-cache …` in its own
// process (the daemon serve runs), creates a rule through A's admin API,
// spends checks alternately on A and B (exactly the limit is admitted in
// all), changes the rule with a PUT on A and prints how long B took to
// decide under it, then stops and removes everything. It exits non-zero
// when any step misbehaves.
//
//	cd service && go run ./internal/demo/fleetdemo -ratelimitd ../bin/ratelimitd
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/service/internal/demo"
	"github.com/sluicehq/sluice/service/internal/pgtest"
	"github.com/sluicehq/sluice/service/internal/ratelimitdtest"
)

func main() {
	cfg := config{Timeout: 60 * time.Second}
	flag.StringVar(&cfg.Bin, "ratelimitd", "../bin/ratelimitd", "the ratelimitd binary (make ratelimitd builds it)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-demo:", err)
		stop()
		os.Exit(1)
	}
}

// config is what run needs.
type config struct {
	Bin     string        // the ratelimitd binary
	Timeout time.Duration // bound on the whole demo
}

// The demo's rule: 10 orders a minute per user, then 20.
const (
	ruleID   = "orders"
	endpoint = "/api/v1/orders"
	limit    = 10
	newLimit = 20
)

func rule(limit int64) map[string]any {
	return map[string]any{"id": ruleID, "name": "orders per user", "dimension": "user", "endpoint_pattern": endpoint,
		"limit": limit, "window_seconds": 60, "algorithm": "token_bucket"}
}

// run is the demo; it writes what it does to w and returns the first step
// that misbehaved. Everything it started is stopped, and its temporary
// directory removed, before it returns.
func run(ctx context.Context, w io.Writer, cfg config) (err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// A directory of our own in the system's temporary directory: as root,
	// PostgreSQL runs as sluicepg and must traverse it.
	dir, err := os.MkdirTemp("", "sluice-fleet-demo-")
	if err != nil {
		return err
	}
	f := &fleet{ctx: ctx, w: w, dir: dir}
	defer func() { err = errors.Join(err, f.stop()) }()
	dsn, redisURL, err := f.startBackends()
	if err != nil {
		return err
	}
	f.say("")
	f.say("== ratelimitd token create fleet-admin --scope write --db %s", dsn)
	token, err := demo.CreateToken(ctx, cfg.Bin, dsn, "fleet-admin")
	if err != nil {
		return err
	}
	f.say("token (shown once, stored hashed): %s", token)
	if err := f.startInstances(dsn, redisURL, token); err != nil {
		return err
	}
	for _, step := range []func() error{f.createRule, f.spend, f.changeRule, f.showCaches} {
		if err := step(); err != nil {
			return fmt.Errorf("%w\ninstance A's logs:\n%s\ninstance B's logs:\n%s", err, f.nodes[0].Logs(), f.nodes[1].Logs())
		}
	}
	return nil
}

// fleet is the demo's state from one step to the next.
type fleet struct {
	ctx   context.Context
	w     io.Writer
	dir   string         // the temporary directory, removed by stop
	stops []func() error // what stop runs, last first
	nodes [2]*ratelimitdtest.Daemon
	a, b  *demo.Client // of instances A and B
	etag  string       // the rule's, as A last answered
}

func (f *fleet) say(format string, args ...any) { fmt.Fprintf(f.w, format+"\n", args...) }

// stop stops everything the demo started, last started first, and
// removes its directory.
func (f *fleet) stop() error {
	var err error
	for i := len(f.stops) - 1; i >= 0; i-- {
		err = errors.Join(err, f.stops[i]())
	}
	if rerr := os.RemoveAll(f.dir); rerr != nil {
		return errors.Join(err, rerr)
	}
	f.say("everything stopped; %s removed", f.dir)
	return err
}

// startBackends starts a throwaway PostgreSQL and a redis-server and
// returns their DSN and URL.
func (f *fleet) startBackends() (dsn, redisURL string, err error) {
	pg, err := pgtest.Launch(filepath.Join(f.dir, "pg"))
	if err != nil {
		return "", "", fmt.Errorf("PostgreSQL (make deps installs it): %w", err)
	}
	f.stops = append(f.stops, func() error { pg.Stop(); return nil })
	f.say("PostgreSQL on 127.0.0.1:%d (a throwaway cluster in %s)", pg.Port(), pg.Dir())
	rd, err := redistest.Launch(filepath.Join(f.dir, "redis"))
	if err != nil {
		return "", "", fmt.Errorf("Redis (make deps installs it): %w", err)
	}
	f.stops = append(f.stops, func() error { rd.Stop(); rd.Close(); return nil })
	f.say("Redis on %s", rd.Addr)
	return pg.DSN(), "redis://" + rd.Addr, nil
}

// startInstances serves two instances, A and B, on one database and one
// Redis. A generous store timeout: a loaded machine must not turn a slow
// Redis call into the failure mode and blur the shared count.
func (f *fleet) startInstances(dsn, redisURL, token string) error {
	for i, name := range []string{"A", "B"} {
		cache := filepath.Join(f.dir, strings.ToLower(name)+".json")
		args := []string{"--db", dsn, "--redis", redisURL, "--rules-cache", cache, "--store-timeout", "1s"}
		f.say("== instance %s: ratelimitd serve %s", name, strings.Join(args, " "))
		d, err := demo.Serve(args...)
		if err != nil {
			return fmt.Errorf("instance %s: %w", name, err)
		}
		f.stops = append(f.stops, func() error { return demo.Stop(d) })
		f.nodes[i] = d
		f.say("instance %s serves HTTP on %s, gRPC on %s", name, d.HTTPAddr, d.GRPCAddr)
	}
	f.a = &demo.Client{Base: "http://" + f.nodes[0].HTTPAddr, Token: token}
	f.b = &demo.Client{Base: "http://" + f.nodes[1].HTTPAddr, Token: token}
	return nil
}

// createRule creates the rule through A's admin API and waits until both
// instances decide under it.
func (f *fleet) createRule() error {
	f.say("")
	f.say(`== POST /api/v1/rules on A {"id":"orders","dimension":"user","endpoint_pattern":"/api/v1/orders","limit":%d,"window_seconds":60,"algorithm":"token_bucket"}`, limit)
	r, err := f.a.Expect(f.ctx, http.StatusCreated, http.MethodPost, "/api/v1/rules", rule(limit), nil, nil)
	if err != nil {
		return err
	}
	f.etag = r.Header.Get("ETag")
	tookB, err := f.b.WaitLimit(f.ctx, "user", "demo-probe", endpoint, ruleID, limit)
	if err != nil {
		return err
	}
	if _, err := f.a.WaitLimit(f.ctx, "user", "demo-probe", endpoint, ruleID, limit); err != nil {
		return err
	}
	f.say("%d Created, ETag %s; B decides under it %s after A's answer", r.Status, f.etag, ms(tookB))
	return nil
}

// spend sends checks of one user alternately to A and B: one limit shared
// by the fleet (Redis holds the counter) admits exactly the limit.
func (f *fleet) spend() error {
	f.say("")
	const n = limit + 4
	f.say("== %d checks of user alice, alternately on A and B (POST /api/v1/rate-limit/check)", n)
	admitted := 0
	for i := range n {
		c, name := f.a, "A"
		if i%2 == 1 {
			c, name = f.b, "B"
		}
		d, err := c.Check(f.ctx, "user", "alice", endpoint, 1)
		if err != nil {
			return err
		}
		f.say("%2d  %s  %s", i+1, name, demo.Decision(d))
		if d.Allowed {
			admitted++
		}
		if d.Allowed != (i < limit) || d.Rule != ruleID {
			return fmt.Errorf("check %d on %s: allowed=%v under rule %q; want allowed=%v under %q", i+1, name, d.Allowed, d.Rule, i < limit, ruleID)
		}
	}
	f.say("admitted %d of %d: exactly the limit, across both instances", admitted, n)
	return nil
}

// changeRule changes the rule with a PUT on A, which reaches B through
// PostgreSQL's NOTIFY, and says how long B took to follow.
func (f *fleet) changeRule() error {
	f.say("")
	f.say("== PUT /api/v1/rules/orders on A (limit %d -> %d), If-Match: %s", limit, newLimit, f.etag)
	r, err := f.a.Expect(f.ctx, http.StatusOK, http.MethodPut, "/api/v1/rules/"+ruleID, rule(newLimit), map[string]string{"If-Match": f.etag}, nil)
	if err != nil {
		return err
	}
	tookB, err := f.b.WaitLimit(f.ctx, "user", "demo-probe", endpoint, ruleID, newLimit)
	if err != nil {
		return err
	}
	f.say("%d OK, ETag %s; B decides under limit %d %s after A's answer", r.Status, r.Header.Get("ETag"), newLimit, ms(tookB))
	return nil
}

// showCaches shows each instance's rules cache, the last good rules it
// keeps for a start while the database is down.
func (f *fleet) showCaches() error {
	for _, name := range []string{"A", "B"} {
		path := filepath.Join(f.dir, strings.ToLower(name)+".json")
		size, err := waitCache(f.ctx, path)
		if err != nil {
			return fmt.Errorf("instance %s's rules cache: %w", name, err)
		}
		f.say("rules cache of %s: %s (%d bytes)", name, path, size)
	}
	return nil
}

// waitCache waits until the rules cache at path holds the changed rule and
// returns its size.
func waitCache(ctx context.Context, path string) (int, error) {
	want := fmt.Sprintf(`"limit":%d`, newLimit)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), " ", ""), want) {
			return len(b), nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("it does not hold %s", want)
			}
			return 0, fmt.Errorf("%s: %w", path, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
