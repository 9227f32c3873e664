package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/service/httpapi"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// checkConfig is what `ratelimitd check` is told.
type checkConfig struct {
	Addr       string
	HTTP       string
	Dimension  string
	Identifier string
	Endpoint   string
	Rule       string
	Cost       int64
	N          int
	Peek       bool
	Reset      bool
	JSON       bool
	TLSCA      string
	Token      string
	Timeout    time.Duration
}

func newCheckFlags(c *checkConfig) *flag.FlagSet {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8081", "the gRPC address of a running ratelimitd")
	fs.StringVar(&c.HTTP, "http", "", "ask the HTTP JSON API at this base URL instead (http://127.0.0.1:8080): POST /api/v1/rate-limit/check")
	fs.StringVar(&c.Dimension, "dimension", "user", "what the identifier is: user, ip, api_key or any name a rule uses")
	fs.StringVar(&c.Identifier, "identifier", "", "who is checked (required): a user id, an address, a key")
	fs.StringVar(&c.Endpoint, "endpoint", "", "the endpoint called, matched by the rules' endpoint patterns")
	fs.StringVar(&c.Rule, "rule", "", "decide under this rule only (its name)")
	fs.Int64Var(&c.Cost, "cost", 1, "units the check takes (0 peeks)")
	fs.IntVar(&c.N, "n", 1, "send the check this many times, one after the other, printing each answer")
	fs.BoolVar(&c.Peek, "peek", false, "GetRemainingQuota: show the quota left, consuming nothing")
	fs.BoolVar(&c.Reset, "reset", false, "ResetLimit: give the identifier its full quota again")
	fs.BoolVar(&c.JSON, "json", false, "print each answer as one JSON object per line")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "connect over TLS, trusting the certificates of this PEM file")
	fs.StringVar(&c.Token, "token", "", "a write token (ratelimitd token create NAME --scope write) sent with --reset, which a server with --grpc-auth=admin (the default with --db) asks for; sent only over TLS (--tls-ca) or to a loopback --addr; prefer the environment variable (a flag shows in ps)")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "bound on each call")
	return fs
}

// checkCmd runs `ratelimitd check`: a client of the native API, so that a
// demo needs no other tool. It exits 0 when every check was allowed, 1 when
// one was denied or failed, 2 on a usage error.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	var c checkConfig
	fs := newCheckFlags(&c)
	err := c.parse(fs, args, env)
	if errors.Is(err, flag.ErrHelp) {
		flagUsage(stdout, fs, checkPrefix, "usage: ratelimitd check --identifier ID [flags]")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd check: %v\n", err)
		return 2
	}
	if c.HTTP != "" {
		return c.runHTTP(ctx, stdout, stderr)
	}
	return c.runGRPC(ctx, stdout, stderr)
}

// parse reads check's flags (bound to c by fs) from args and the
// environment and checks them, naming the flag of an error.
func (c *checkConfig) parse(fs *flag.FlagSet, args []string, env lookupEnv) error {
	rest, err := parseFlags(fs, args, checkPrefix, env)
	switch {
	case err != nil:
		return err
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q (flags only)", rest[0])
	case c.Identifier == "":
		return errors.New("--identifier: required")
	case c.Cost < 0:
		return fmt.Errorf("--cost: must not be negative, got %d", c.Cost)
	case c.N < 1:
		return fmt.Errorf("--n: must be at least 1, got %d", c.N)
	case c.Peek && c.Reset:
		return errors.New("--peek, --reset: give one of them")
	case c.HTTP != "" && c.Reset:
		return errors.New("--reset: over gRPC only (the HTTP API checks)")
	}
	return nil
}

// runGRPC sends the checks to the native API at --addr and prints each
// answer.
func (c *checkConfig) runGRPC(ctx context.Context, stdout, stderr io.Writer) int {
	dopts, err := c.dialOptions()
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd check: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(c.Addr, dopts...)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd check: --addr: %v\n", err)
		return 2
	}
	defer conn.Close()
	client := ratelimitv1.NewRateLimitServiceClient(conn)
	code := 0
	for i := 0; i < c.N; i++ {
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		line, ok, err := c.call(cctx, client)
		cancel()
		if err != nil {
			s := status.Convert(err)
			fmt.Fprintf(stderr, "ratelimitd check: %s: %s\n", s.Code(), s.Message())
			return 1
		}
		fmt.Fprintln(stdout, line)
		if !ok {
			code = 1
		}
	}
	return code
}

// dialOptions are the connection's credentials: TLS trusting --tls-ca's
// certificates (plaintext without it), and --token with --reset, sent
// only over TLS or to a loopback --addr.
func (c *checkConfig) dialOptions() ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: no certificate in %s", c.TLSCA)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if !c.Reset || c.Token == "" {
		return dopts, nil
	}
	switch {
	case c.TLSCA != "":
		return append(dopts, grpc.WithPerRPCCredentials(remotestore.TokenCredentials(c.Token))), nil
	case isLoopback(c.Addr):
		return append(dopts, grpc.WithPerRPCCredentials(remotestore.InsecureTokenCredentials(c.Token))), nil
	}
	return nil, fmt.Errorf("--token: would cross the network in plaintext to %s: give --tls-ca, or an --addr on loopback", c.Addr)
}

// isLoopback reports whether addr (host:port) is a loopback address or
// localhost, where a token may go without TLS.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// call makes one call and formats its answer; ok is false on a denial.
func (c *checkConfig) call(ctx context.Context, client ratelimitv1.RateLimitServiceClient) (string, bool, error) {
	if c.Reset {
		_, err := client.ResetLimit(ctx, &ratelimitv1.ResetRequest{
			Identifier: c.Identifier, Dimension: c.Dimension, Endpoint: c.Endpoint, RuleId: c.Rule,
		})
		if err != nil {
			return "", false, err
		}
		if c.JSON {
			return `{"reset":true}`, true, nil
		}
		return "reset " + c.Dimension + " " + c.Identifier, true, nil
	}
	cost := c.Cost
	req := &ratelimitv1.CheckRequest{
		Identifier: c.Identifier, Dimension: c.Dimension, Endpoint: c.Endpoint, RuleId: c.Rule, Cost: &cost,
	}
	var resp *ratelimitv1.CheckResponse
	var err error
	if c.Peek {
		resp, err = client.GetRemainingQuota(ctx, req)
	} else {
		resp, err = client.CheckRateLimit(ctx, req)
	}
	if err != nil {
		return "", false, err
	}
	return formatCheck(resp, c.JSON), resp.GetAllowed(), nil
}

// checkOutput is the JSON form of an answer.
type checkOutput struct {
	Allowed    bool      `json:"allowed"`
	State      string    `json:"state"`
	Rule       string    `json:"rule"`
	Current    int64     `json:"current"`
	Limit      int64     `json:"limit"`
	Remaining  int64     `json:"remaining"`
	ResetAt    time.Time `json:"reset_at,omitzero"`
	RetryAfter float64   `json:"retry_after_seconds,omitempty"`
	RetryNever bool      `json:"retry_never,omitempty"`
	// Degraded names the failure mode that answered instead of a rule
	// (fail_open, fail_closed, fallback); absent when a rule decided.
	Degraded string `json:"degraded,omitempty"`
}

// formatCheck prints an answer: one line, "allowed"/"WARNING"/"DENIED"
// first, or a JSON object.
func formatCheck(r *ratelimitv1.CheckResponse, asJSON bool) string {
	state := strings.ToLower(strings.TrimPrefix(r.GetState().String(), "STATE_"))
	o := checkOutput{
		Allowed: r.GetAllowed(), State: state, Rule: r.GetRule(), Current: r.GetCurrent(),
		Limit: r.GetLimit(), Remaining: r.GetRemaining(), RetryNever: r.GetRetryNever(),
		Degraded: degradedName(r.GetDegraded()),
	}
	if r.GetResetAt() != nil {
		o.ResetAt = r.GetResetAt().AsTime()
	}
	if r.GetRetryAfter() != nil {
		o.RetryAfter = r.GetRetryAfter().AsDuration().Seconds()
	}
	if asJSON {
		b, _ := json.Marshal(o)
		return string(b)
	}
	verdict := "allowed"
	switch {
	case !o.Allowed:
		verdict = "denied "
	case state == "warning":
		verdict = "warning"
	}
	rule := o.Rule
	if rule == "" {
		rule = "(no rule applies)"
	}
	s := fmt.Sprintf("%s  rule=%s  used=%d/%d  remaining=%d", verdict, rule, o.Current, o.Limit, o.Remaining)
	if o.Degraded == "fail_open" || o.Degraded == "fail_closed" { // no counter was read: only the limit is printed
		s = fmt.Sprintf("%s  rule=%s  limit=%d", verdict, rule, o.Limit)
	}
	if o.Degraded != "" {
		s += "  degraded=" + o.Degraded
	}
	if !o.ResetAt.IsZero() {
		s += "  reset_at=" + o.ResetAt.UTC().Format(time.RFC3339Nano)
	}
	switch {
	case o.RetryNever:
		s += "  retry_after=never"
	case !o.Allowed:
		s += fmt.Sprintf("  retry_after=%.3fs", o.RetryAfter)
	}
	return s
}

// degradedName is the name of d the HTTP API uses (engine.DegradedName):
// "" when the limiter decided on its store.
func degradedName(d ratelimitv1.Degraded) string {
	if d == ratelimitv1.Degraded_DEGRADED_NONE {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(d.String(), "DEGRADED_"))
}

// runHTTP sends the checks to the HTTP JSON API.
func (c *checkConfig) runHTTP(ctx context.Context, stdout, stderr io.Writer) int {
	u, err := url.Parse(c.HTTP)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "ratelimitd check: --http: want http://host:port, got %q\n", c.HTTP)
		return 2
	}
	u = u.JoinPath("/api/v1/rate-limit/check")
	cost := c.Cost
	if c.Peek {
		cost = 0
	}
	body, _ := json.Marshal(httpapi.Request{
		KeyType: c.Dimension, KeyValue: c.Identifier, Endpoint: c.Endpoint, RuleID: c.Rule, RequestCount: &cost,
	})
	client := &http.Client{Timeout: c.Timeout}
	code := 0
	for i := 0; i < c.N; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimitd check: %v\n", err)
			return 2
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintf(stderr, "ratelimitd check: %v\n", err)
			return 1
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			fmt.Fprintf(stderr, "ratelimitd check: HTTP %d: %s\n", resp.StatusCode, strings.TrimSpace(string(data)))
			return 1
		}
		var r httpapi.Response
		if err := json.Unmarshal(data, &r); err != nil {
			fmt.Fprintf(stderr, "ratelimitd check: HTTP answer: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, formatCheck(nativeAnswer(r), c.JSON))
		if !r.Allowed {
			code = 1
		}
	}
	return code
}

// nativeAnswer is an answer of the HTTP API as the native API gives it,
// for formatCheck: a denial without retry_after can never pass.
func nativeAnswer(r httpapi.Response) *ratelimitv1.CheckResponse {
	out := &ratelimitv1.CheckResponse{
		Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining, Current: r.Limit - r.Remaining, Rule: r.Rule,
		State:    ratelimitv1.State(ratelimitv1.State_value["STATE_"+strings.ToUpper(r.State)]),
		Degraded: ratelimitv1.Degraded(ratelimitv1.Degraded_value["DEGRADED_"+strings.ToUpper(r.Degraded)]),
	}
	if r.ResetAt != nil {
		out.ResetAt = timestamppb.New(*r.ResetAt)
	}
	switch {
	case r.RetryAfter != nil:
		out.RetryAfter = durationpb.New(time.Duration(*r.RetryAfter * float64(time.Second)))
	case !r.Allowed:
		out.RetryNever = true
	}
	return out
}
