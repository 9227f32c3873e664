// Command fleetdemo is `make fleet-demo`: ratelimitd as a fleet, its rules
// in PostgreSQL and its counters in Redis. It starts a throwaway
// PostgreSQL (initdb in a temporary directory, postgres on a free loopback
// port, as the service's tests do: pgtest.Launch) and redis-server on a
// free loopback port (redistest.Launch), creates a write token with
// `ratelimitd token create`, starts two instances A and B with `serve --db
// postgres://… --redis redis://… --rules-cache …`, creates a rule through
// A's admin API, spends checks alternately on A and B (exactly the limit
// is admitted in all), changes the rule with a PUT on A and prints how
// long B took to decide under it, then stops and removes everything. It
// exits non-zero when any step misbehaves.
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
	say := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	// A directory of our own in the system's temporary directory: as root,
	// PostgreSQL runs as sluicepg and must traverse it.
	dir, err := os.MkdirTemp("", "sluice-fleet-demo-")
	if err != nil {
		return err
	}
	var stops []func() error // run in reverse order on the way out
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			err = errors.Join(err, stops[i]())
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
			return
		}
		say("everything stopped; %s removed", dir)
	}()

	pg, err := pgtest.Launch(filepath.Join(dir, "pg"))
	if err != nil {
		return fmt.Errorf("PostgreSQL (make deps installs it): %w", err)
	}
	stops = append(stops, func() error { pg.Stop(); return nil })
	say("PostgreSQL on 127.0.0.1:%d (a throwaway cluster in %s)", pg.Port(), pg.Dir())
	rd, err := redistest.Launch(filepath.Join(dir, "redis"))
	if err != nil {
		return fmt.Errorf("Redis (make deps installs it): %w", err)
	}
	stops = append(stops, func() error { rd.Stop(); rd.Close(); return nil })
	say("Redis on %s", rd.Addr)
	dsn, redisURL := pg.DSN(), "redis://"+rd.Addr

	say("")
	say("== ratelimitd token create fleet-admin --scope write --db %s", dsn)
	token, err := demo.CreateToken(ctx, cfg.Bin, dsn, "fleet-admin")
	if err != nil {
		return err
	}
	say("token (shown once, stored hashed): %s", token)

	// Two instances on one database and one Redis. A generous store
	// timeout: a loaded machine must not turn a slow Redis call into the
	// failure mode and blur the shared count.
	var procs [2]*ratelimitdtest.Process
	var clients [2]*demo.Client
	for i, name := range []string{"A", "B"} {
		cache := filepath.Join(dir, strings.ToLower(name)+".json")
		args := []string{"--db", dsn, "--redis", redisURL, "--rules-cache", cache, "--store-timeout", "1s"}
		say("== instance %s: ratelimitd serve %s", name, strings.Join(args, " "))
		p, err := ratelimitdtest.Launch(cfg.Bin, nil, args...)
		if err != nil {
			return fmt.Errorf("instance %s: %w", name, err)
		}
		stops = append(stops, func() error { return demo.Stop(p) })
		procs[i], clients[i] = p, &demo.Client{Base: "http://" + p.HTTPAddr, Token: token}
		say("instance %s serves HTTP on %s, gRPC on %s", name, p.HTTPAddr, p.GRPCAddr)
	}
	a, b := clients[0], clients[1]
	fail := func(err error) error {
		return fmt.Errorf("%w\ninstance A's logs:\n%s\ninstance B's logs:\n%s", err, procs[0].Logs(), procs[1].Logs())
	}

	say("")
	say(`== POST /api/v1/rules on A {"id":"orders","dimension":"user","endpoint_pattern":"/api/v1/orders","limit":%d,"window_seconds":60,"algorithm":"token_bucket"}`, limit)
	r, err := a.Expect(ctx, http.StatusCreated, http.MethodPost, "/api/v1/rules", rule(limit), nil, nil)
	if err != nil {
		return fail(err)
	}
	etag := r.Header.Get("ETag")
	tookB, err := b.WaitLimit(ctx, "user", "demo-probe", endpoint, ruleID, limit)
	if err != nil {
		return fail(err)
	}
	if _, err := a.WaitLimit(ctx, "user", "demo-probe", endpoint, ruleID, limit); err != nil {
		return fail(err)
	}
	say("%d Created, ETag %s; B decides under it %s after A's answer", r.Status, etag, ms(tookB))

	// One limit shared by the fleet: Redis holds the counter.
	say("")
	const n = limit + 4
	say("== %d checks of user alice, alternately on A and B (POST /api/v1/rate-limit/check)", n)
	admitted := 0
	for i := range n {
		c, name := a, "A"
		if i%2 == 1 {
			c, name = b, "B"
		}
		d, err := c.Check(ctx, "user", "alice", endpoint, 1)
		if err != nil {
			return fail(err)
		}
		say("%2d  %s  %s", i+1, name, demo.Decision(d))
		if d.Allowed {
			admitted++
		}
		if d.Allowed != (i < limit) || d.Rule != ruleID {
			return fail(fmt.Errorf("check %d on %s: allowed=%v under rule %q; want allowed=%v under %q", i+1, name, d.Allowed, d.Rule, i < limit, ruleID))
		}
	}
	say("admitted %d of %d: exactly the limit, across both instances", admitted, n)

	// A change on A reaches B through PostgreSQL's NOTIFY.
	say("")
	say("== PUT /api/v1/rules/orders on A (limit %d -> %d), If-Match: %s", limit, newLimit, etag)
	r, err = a.Expect(ctx, http.StatusOK, http.MethodPut, "/api/v1/rules/"+ruleID, rule(newLimit), map[string]string{"If-Match": etag}, nil)
	if err != nil {
		return fail(err)
	}
	if tookB, err = b.WaitLimit(ctx, "user", "demo-probe", endpoint, ruleID, newLimit); err != nil {
		return fail(err)
	}
	say("%d OK, ETag %s; B decides under limit %d %s after A's answer", r.Status, r.Header.Get("ETag"), newLimit, ms(tookB))

	// Each instance keeps the last good rules for a start while the
	// database is down.
	for i, name := range []string{"a.json", "b.json"} {
		path := filepath.Join(dir, name)
		size, err := waitCache(ctx, path)
		if err != nil {
			return fail(fmt.Errorf("instance %s's rules cache: %w", []string{"A", "B"}[i], err))
		}
		say("rules cache of %s: %s (%d bytes)", []string{"A", "B"}[i], path, size)
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
