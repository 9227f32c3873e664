package servicebench

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// Native API scenario: ratelimitd's own sluice.ratelimit.v1 API on its
// memory store, under rules in sluice's format.
const (
	// NativeDimension is the dimension of every native check.
	NativeDimension = "user"
	// NativeEndpoint is the endpoint of every native check.
	NativeEndpoint = "/api/bench"
	// BatchSize is the number of checks in one CheckRateLimitBatch call.
	BatchSize = 100
)

// NativeRulesYAML is the rules file of the native API scenario, in sluice's
// format: one token bucket per user, never emptied, and dimension TinyKey
// limited to TinyLimit per minute (for the check that ratelimitd limits).
func NativeRulesYAML() []byte {
	return fmt.Appendf(nil, `# The service benchmark's native rules: one token bucket per user.
rules:
  - name: bench-per-user
    dimension: %s
    algorithm: token_bucket
    limit: %d
    window_seconds: 1
  - name: bench-tiny
    dimension: %s
    algorithm: fixed_window
    limit: %d
    window_seconds: 60
`, NativeDimension, Rate, TinyKey, TinyLimit)
}

// NativeCheck returns the CheckRequest of one native check of identifier in
// dimension (cost absent: 1).
func NativeCheck(dimension, identifier string) *ratelimitv1.CheckRequest {
	return &ratelimitv1.CheckRequest{Identifier: identifier, Dimension: dimension, Endpoint: NativeEndpoint}
}

func nativeCheck(user string) *ratelimitv1.CheckRequest { return NativeCheck(NativeDimension, user) }

// nativeReady succeeds once ratelimitd answers a native check allowed under
// NativeRulesYAML's limit.
func nativeReady(ctx context.Context, addr string) error {
	conns, err := Dial(addr, 1)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	resp, err := ratelimitv1.NewRateLimitServiceClient(conns[0]).CheckRateLimit(ctx, nativeCheck("probe"))
	if err != nil {
		return err
	}
	if !resp.GetAllowed() || resp.GetLimit() != Rate {
		return fmt.Errorf("native probe: allowed %v, limit %d, want allowed under %d", resp.GetAllowed(), resp.GetLimit(), Rate)
	}
	return nil
}

// nativeDecider sends CheckRateLimit, or CheckRateLimitBatch of BatchSize
// users (the user and the next ones), round robin over its connections.
type nativeDecider struct {
	clients []ratelimitv1.RateLimitServiceClient
	next    atomic.Uint32
	checks  map[string]*ratelimitv1.CheckRequest
	batches map[string]*ratelimitv1.BatchRequest
}

func newNativeDecider(conns []*grpc.ClientConn, users []string, batch bool) *nativeDecider {
	d := &nativeDecider{}
	for _, c := range conns {
		d.clients = append(d.clients, ratelimitv1.NewRateLimitServiceClient(c))
	}
	if !batch {
		d.checks = make(map[string]*ratelimitv1.CheckRequest, len(users))
		for _, u := range users {
			d.checks[u] = nativeCheck(u)
		}
		return d
	}
	d.batches = make(map[string]*ratelimitv1.BatchRequest, len(users))
	for i, u := range users {
		b := &ratelimitv1.BatchRequest{}
		for j := range BatchSize {
			b.Checks = append(b.Checks, nativeCheck(users[(i+j)%len(users)]))
		}
		d.batches[u] = b
	}
	return d
}

func (d *nativeDecider) Decide(ctx context.Context, user string) (bool, error) {
	c := d.clients[int(d.next.Add(1))%len(d.clients)]
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if d.batches == nil {
		req, ok := d.checks[user]
		if !ok {
			return false, fmt.Errorf("user %q: not among the decider's users", user)
		}
		resp, err := c.CheckRateLimit(ctx, req)
		if err != nil {
			return false, err
		}
		return resp.GetAllowed(), nil
	}
	req, ok := d.batches[user]
	if !ok {
		return false, fmt.Errorf("user %q: not among the decider's users", user)
	}
	resp, err := c.CheckRateLimitBatch(ctx, req)
	if err != nil {
		return false, err
	}
	if len(resp.GetResults()) != len(req.Checks) {
		return false, fmt.Errorf("batch: %d results for %d checks", len(resp.GetResults()), len(req.Checks))
	}
	allowed := true
	for i, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			return false, fmt.Errorf("batch check %d: %w", i, status.ErrorProto(e))
		}
		allowed = allowed && r.GetResponse().GetAllowed()
	}
	return allowed, nil
}

func nativeSingle(c Conn) (redisbench.Decider, func(), error) {
	return newNativeDecider(c.GRPC, c.Users, false), nil, nil
}

func nativeBatch(c Conn) (redisbench.Decider, func(), error) {
	return newNativeDecider(c.GRPC, c.Users, true), nil, nil
}
