// Package propbench holds the propagation benchmark of module
// github.com/sluicehq/sluice/bench (ratelimitd), shared by its go
// test benchmark and its report program (cmd/report): two ratelimitd
// processes A and B (`ratelimitd serve --db postgres://…`, each on its
// memory store) on one real PostgreSQL the benchmark starts; a rule's limit
// is changed through A (`PUT /api/v1/rules/{id}` with an admin token, or,
// while ratelimitd does not serve the admin API, the same write through
// rulesdb.Update on the database), and B is checked in a tight loop until
// its first decision under the new limit. The delay from the write's
// response to that decision, over many changes, is the propagation time.
// The targets: max < 1 s, p50 < 100 ms.
package propbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/bench/rulesbench"
	"github.com/sluicehq/sluice/bench/servicebench"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The rule the changes alternate: dimension Dimension on Endpoint, its
// limit switching between LimitA and LimitB per second (never reached, so
// every check is allowed and reports the limit in force).
const (
	RuleID    = "propbench"
	Dimension = "user"
	Endpoint  = "/api/propbench"
	LimitA    = 1_000_000
	LimitB    = 1_000_001
)

// Via says how a change is written.
type Via string

const (
	// ViaAPI is PUT /api/v1/rules/{id} on instance A with a write token.
	ViaAPI Via = "PUT /api/v1/rules/{id} on instance A"
	// ViaDB is rulesdb.Update on the database (the write the admin API
	// makes, without HTTP), for a ratelimitd that does not serve the admin
	// API.
	ViaDB Via = "rulesdb.Update on the database (the admin API's write, without HTTP)"
)

// rule returns the benchmark's rule with limit.
func rule(limit int64) rulesdb.Rule {
	return rulesdb.Rule{ID: RuleID, Name: "propagation benchmark", Dimension: Dimension, EndpointPattern: Endpoint,
		Limit: limit, WindowSeconds: 1, Algorithm: "token_bucket", Enabled: true}
}

// Cluster is PostgreSQL and two ratelimitd instances on it.
type Cluster struct {
	PG    *Postgres
	A, B  *servicebench.Process
	DB    *rulesdb.DB
	Token string // a write token from `ratelimitd token create`, "" if that failed
	// TokenErr says why there is no token.
	TokenErr error
	// AdminURL is the base of the admin API changes go through: instance
	// A's HTTP listener ("http://" + A.HTTPAddr) unless set otherwise.
	AdminURL string
	conns    []*grpc.ClientConn
	check    ratelimitv1.RateLimitServiceClient
}

// StartCluster starts PostgreSQL, stores the rule (LimitA), creates a write
// token with bin (`ratelimitd token create propbench --scope write --db
// DSN`) and starts instances A and B with bin, each ready once it decides
// a check under the rule. extra is added to both instances' arguments.
func StartCluster(ctx context.Context, bin string, extra ...string) (*Cluster, error) {
	return StartClusterRules(ctx, bin, 1, extra...)
}

// StartClusterRules is StartCluster with n rules stored in all: the
// benchmark's rule and n-1 of rulesbench's (rulesbench.Row from 4 on, each
// with an endpoint pattern the benchmark's checks do not match), written in
// one transaction before the instances start.
func StartClusterRules(ctx context.Context, bin string, n int, extra ...string) (*Cluster, error) {
	pg, err := StartPostgres(ctx)
	if err != nil {
		return nil, err
	}
	c := &Cluster{PG: pg}
	fail := func(err error) (*Cluster, error) { c.Close(); return nil, err }
	if n > 1 {
		if err := rulesbench.FillRows(ctx, pg.DSN(), len(rulesbench.Dimensions), n-1); err != nil {
			return fail(err)
		}
	}
	if c.DB, err = rulesdb.Open(ctx, pg.DSN()); err != nil {
		return fail(err)
	}
	if _, err := c.DB.Create(ctx, "propbench", rule(LimitA)); err != nil {
		return fail(err)
	}
	c.Token, c.TokenErr = createToken(ctx, bin, pg.DSN())
	ready := func(ctx context.Context, addr string) error { return checkLimit(ctx, addr, LimitA) }
	if c.A, err = servicebench.StartRatelimitdDB(ctx, bin, pg.DSN(), extra, ready); err != nil {
		return fail(fmt.Errorf("instance A: %w", err))
	}
	if c.B, err = servicebench.StartRatelimitdDB(ctx, bin, pg.DSN(), extra, ready); err != nil {
		return fail(fmt.Errorf("instance B: %w", err))
	}
	if c.conns, err = servicebench.Dial(c.B.GRPCAddr, 1); err != nil {
		return fail(err)
	}
	c.check = ratelimitv1.NewRateLimitServiceClient(c.conns[0])
	c.AdminURL = "http://" + c.A.HTTPAddr
	return c, nil
}

// createToken runs `ratelimitd token create` and returns the secret it
// prints (alone on stdout).
func createToken(ctx context.Context, bin, dsn string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "token", "create", "propbench", "--scope", "write", "--db", dsn)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ratelimitd token create: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	tok := strings.TrimSpace(out.String())
	if tok == "" || strings.ContainsAny(tok, " \n") {
		return "", fmt.Errorf("ratelimitd token create: want the secret alone on stdout, got %q", out.String())
	}
	return tok, nil
}

// checkLimit succeeds once the instance at addr decides a check under the
// rule with limit.
func checkLimit(ctx context.Context, addr string, limit int64) error {
	conns, err := servicebench.Dial(addr, 1)
	if err != nil {
		return err
	}
	defer conns[0].Close()
	got, err := limitOf(ctx, ratelimitv1.NewRateLimitServiceClient(conns[0]))
	if err != nil {
		return err
	}
	if got != limit {
		return fmt.Errorf("limit %d, want %d", got, limit)
	}
	return nil
}

// limitOf returns the limit of one check's deciding rule (cost 1 of a
// limit never reached).
func limitOf(ctx context.Context, c ratelimitv1.RateLimitServiceClient) (int64, error) {
	resp, err := c.CheckRateLimit(ctx, &ratelimitv1.CheckRequest{Dimension: Dimension, Identifier: "propbench", Endpoint: Endpoint})
	if err != nil {
		return 0, err
	}
	if resp.GetRule() != RuleID || !resp.GetAllowed() {
		return 0, fmt.Errorf("check decided by rule %q, allowed %v; want %q, allowed", resp.GetRule(), resp.GetAllowed(), RuleID)
	}
	return resp.GetLimit(), nil
}

// Close stops the instances and PostgreSQL.
func (c *Cluster) Close() {
	for _, cc := range c.conns {
		cc.Close()
	}
	for _, p := range []*servicebench.Process{c.A, c.B} {
		if p != nil {
			p.Close()
		}
	}
	if c.DB != nil {
		_ = c.DB.Close()
	}
	if c.PG != nil {
		c.PG.Close()
	}
}

// API reports whether instance A serves the admin API with the token: GET
// /api/v1/rules/{id} answers 200.
func (c *Cluster) API(ctx context.Context) (bool, error) {
	if c.Token == "" {
		return false, c.TokenErr
	}
	_, status, err := c.get(ctx)
	if err != nil {
		return false, err
	}
	return status == http.StatusOK, nil
}

func (c *Cluster) url() string { return c.AdminURL + "/api/v1/rules/" + RuleID }

// get returns the rule's ETag from A's admin API.
func (c *Cluster) get(ctx context.Context) (etag string, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(), nil)
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("ETag"), resp.StatusCode, nil
}

// put changes the rule's limit through A's admin API, with If-Match etag,
// and returns the new ETag.
func (c *Cluster) put(ctx context.Context, etag string, limit int64) (string, error) {
	body, err := json.Marshal(rule(limit))
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url(), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", etag)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("PUT %s: %s: %s", c.url(), resp.Status, bytes.TrimSpace(msg))
	}
	return resp.Header.Get("ETag"), nil
}

// Config is one propagation run.
type Config struct {
	// Changes is the number of limit changes (100 by default).
	Changes int
	// Pause is the time between a change seen on B and the next change,
	// plus a jitter of up to as much again (so that the changes fall at
	// every phase of the instances' revision polls); 20 ms by default.
	Pause time.Duration
	// Timeout bounds the wait for one change on B (5 s by default): a
	// change not seen within it fails the run.
	Timeout time.Duration
	// Via is how changes are written: ViaAPI (the default when A serves
	// the admin API) or ViaDB.
	Via Via
}

// Result is what a run measured.
type Result struct {
	Via Via
	// Delays holds, per change, the time from the write's response to the
	// first decision under the new limit on B; Writes the write's own time
	// (the PUT's round trip, or Update's).
	Delays, Writes []time.Duration
	// Checks is the number of checks made on B.
	Checks int64
}

// Quantile returns the q-quantile (0..1) of ds, nearest rank.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Run makes cfg.Changes changes of the rule's limit, alternating LimitB and
// LimitA, each as soon as B decided under the previous one (after a pause).
func (c *Cluster) Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.setDefaults()
	res := Result{Via: cfg.Via}
	if res.Via == "" {
		res.Via = ViaDB
		if ok, _ := c.API(ctx); ok {
			res.Via = ViaAPI
		}
	}
	etag := ""
	if res.Via == ViaAPI {
		var status int
		var err error
		if etag, status, err = c.get(ctx); err != nil || status != http.StatusOK {
			return res, fmt.Errorf("GET %s: status %d: %v", c.url(), status, err)
		}
	}
	cur, err := limitOf(ctx, c.check)
	if err != nil {
		return res, fmt.Errorf("instance B: %w", err)
	}
	for i := range cfg.Changes {
		next := int64(LimitA)
		if cur == LimitA {
			next = LimitB
		}
		time.Sleep(cfg.Pause + rand.N(cfg.Pause))
		start := time.Now()
		switch res.Via {
		case ViaAPI:
			etag, err = c.put(ctx, etag, next)
		default:
			_, err = c.DB.Update(ctx, "propbench", rule(next), "*")
		}
		if err != nil {
			return res, fmt.Errorf("change %d: %w", i+1, err)
		}
		written := time.Now()
		res.Writes = append(res.Writes, written.Sub(start))
		if err := c.awaitLimit(ctx, &res, cur, next, written, cfg.Timeout); err != nil {
			return res, fmt.Errorf("change %d: %w", i+1, err)
		}
		cur = next
	}
	return res, nil
}

// setDefaults sets the fields of cfg left zero (or negative) to their
// defaults.
func (cfg *Config) setDefaults() {
	if cfg.Changes <= 0 {
		cfg.Changes = 100
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 20 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
}

// awaitLimit checks on B until it decides under next, the limit written
// at written (its delay then in res.Delays), for timeout at most; until
// then B must decide under cur.
func (c *Cluster) awaitLimit(ctx context.Context, res *Result, cur, next int64, written time.Time, timeout time.Duration) error {
	deadline := written.Add(timeout)
	for {
		got, err := limitOf(ctx, c.check)
		res.Checks++
		if err != nil {
			return fmt.Errorf("instance B: %w", err)
		}
		if got == next {
			res.Delays = append(res.Delays, time.Since(written))
			return nil
		}
		if got != cur {
			return fmt.Errorf("instance B decided under limit %d, neither %d nor %d", got, cur, next)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance B still decides under limit %d %s after the write", cur, timeout)
		}
	}
}
