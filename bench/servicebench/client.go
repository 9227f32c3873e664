package servicebench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/bench/redisbench"
)

// CallTimeout bounds every call of the load generator: a server that stops
// answering fails the run instead of hanging it.
const CallTimeout = 5 * time.Second

// Dial opens n gRPC client connections to addr (plaintext, loopback), the
// load generator's channels: Envoy keeps one per worker thread and upstream
// host, so a run uses a few, not one per caller.
func Dial(addr string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// Request returns the ShouldRateLimit request of one check: domain Domain,
// one descriptor with the one entry (key, value), hits_addend unset (1).
func Request(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
	}
}

// probe asks the server at addr for one check of a user that the load never
// uses and succeeds once the answer is OK with the rules' limit on it (the
// rules are loaded and applied).
func probe(ctx context.Context, addr string) error {
	conns, err := Dial(addr, 1)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	resp, err := rlsv3.NewRateLimitServiceClient(conns[0]).ShouldRateLimit(ctx, Request(UserKey, "probe"))
	if err != nil {
		return err
	}
	return CheckLimit(resp)
}

// CheckLimit verifies that a response to Request(UserKey, …) is OK and
// carries the rules' limit for users (Rate per second): the server applied
// the benchmark's rules, not no limit at all.
func CheckLimit(resp *rlsv3.RateLimitResponse) error {
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("overall code %s, want OK", resp.GetOverallCode())
	}
	if len(resp.GetStatuses()) != 1 {
		return fmt.Errorf("%d statuses, want 1", len(resp.GetStatuses()))
	}
	l := resp.GetStatuses()[0].GetCurrentLimit()
	if l == nil {
		return errNotReady
	}
	if l.GetRequestsPerUnit() != Rate || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		return fmt.Errorf("current_limit %d per %s, want %d per SECOND", l.GetRequestsPerUnit(), l.GetUnit(), Rate)
	}
	return nil
}

// rlsDecider sends one ShouldRateLimit per check, each caller's call on
// the next of its connections.
type rlsDecider struct {
	clients []rlsv3.RateLimitServiceClient
	next    atomic.Uint32
	reqs    map[string]*rlsv3.RateLimitRequest // built once: no allocation of the harness per call
}

// NewEnvoyDecider returns a redisbench.Decider that checks a user by
// ShouldRateLimit (Request(UserKey, user)) over conns, for every user of
// users: allowed is an OK overall code.
func NewEnvoyDecider(conns []*grpc.ClientConn, users []string) redisbench.Decider {
	d := &rlsDecider{reqs: make(map[string]*rlsv3.RateLimitRequest, len(users))}
	for _, c := range conns {
		d.clients = append(d.clients, rlsv3.NewRateLimitServiceClient(c))
	}
	for _, u := range users {
		d.reqs[u] = Request(UserKey, u)
	}
	return d
}

func (d *rlsDecider) Decide(ctx context.Context, user string) (bool, error) {
	req, ok := d.reqs[user]
	if !ok {
		return false, fmt.Errorf("user %q: not among the decider's users", user)
	}
	c := d.clients[int(d.next.Add(1))%len(d.clients)]
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
}
