package adminauth

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ErrTooManyFailures is returned by Authenticate, without asking the
// database, for an unknown secret from a client whose recent
// authentications failed too often (see Wrap): 429.
var ErrTooManyFailures = errors.New("adminauth: too many failed authentications from this client; retry later")

// Failed authentications are bounded per client (its IPv4 address, or
// its IPv6 /64): each one costs a database lookup (a secret not in the
// cache), and a client guessing secrets would otherwise put the database
// on the hot path of anyone who can reach the admin API. A client may
// fail failedBurst times at once, then failedPerMinute times a minute;
// past that its unknown secrets are refused (429) with no lookup, while
// tokens already in the cache still pass.
const (
	failedBurst     = 20
	failedPerMinute = 20
	// maxClients bounds the clients remembered; full, the ones back to a
	// full budget are dropped, then (an attack from very many addresses)
	// every client is forgotten.
	maxClients = 10000
)

// failures counts each client's failed authentications (a token bucket
// per client).
type failures struct {
	mu sync.Mutex
	m  map[netip.Prefix]*budget
}

type budget struct {
	left float64
	at   time.Time
}

// refill returns b's budget at now.
func (b *budget) refill(now time.Time) float64 {
	return min(failedBurst, b.left+now.Sub(b.at).Minutes()*failedPerMinute)
}

// allowed reports whether client may cost a lookup at now; retry is the
// wait until it may when not.
func (f *failures) allowed(client netip.Prefix, now time.Time) (ok bool, retry time.Duration) {
	if !client.IsValid() {
		return true, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.m[client]
	if b == nil {
		return true, 0
	}
	left := b.refill(now)
	if left >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - left) / failedPerMinute * float64(time.Minute))
}

// failed spends one of client's budget at now.
func (f *failures) failed(client netip.Prefix, now time.Time) {
	if !client.IsValid() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.m[client]
	if b == nil {
		if len(f.m) >= maxClients {
			for k, o := range f.m {
				if o.refill(now) >= failedBurst {
					delete(f.m, k)
				}
			}
			if len(f.m) >= maxClients {
				clear(f.m)
			}
		}
		b = &budget{left: failedBurst, at: now}
		f.m[client] = b
	}
	b.left, b.at = b.refill(now)-1, now
}

type clientKey struct{}

// WithClient returns ctx carrying the client of a request (its remote
// address, http.Request.RemoteAddr): Authenticate under it bounds that
// client's failed authentications (Wrap does this itself; the admin
// page's sign-in calls it).
func WithClient(ctx context.Context, remoteAddr string) context.Context {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ctx
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ctx
	}
	return context.WithValue(ctx, clientKey{}, p)
}

// clientOf returns the client WithClient put in ctx (invalid if none).
func clientOf(ctx context.Context) netip.Prefix {
	p, _ := ctx.Value(clientKey{}).(netip.Prefix)
	return p
}
