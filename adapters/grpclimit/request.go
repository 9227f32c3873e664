package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// call is one gRPC call as the limiter sees it. A *call is the
// keyfunc.Request of the call (a pointer, so boxing it allocates nothing),
// and, as *callContext, the context handed to the server handler, which
// carries the Decision: one allocation serves both.
type call struct {
	parent  context.Context
	method  string
	client  bool        // outgoing call: Header reads the outgoing metadata
	out     metadata.MD // outgoing metadata, loaded on first use
	outOK   bool
	decided bool
	d       core.Decision
}

var _ keyfunc.Request = (*call)(nil)

func (r *call) Context() context.Context { return r.parent }

// Method is "POST": every gRPC call is an HTTP/2 POST.
func (r *call) Method() string { return "POST" }

// Route is the full method, "/pkg.Service/Method".
func (r *call) Route() string { return r.method }

// Path is the full method, as the HTTP/2 :path of the call.
func (r *call) Path() string { return r.method }

// Header returns the first value of the metadata key name.
func (r *call) Header(name string) string {
	if v := r.HeaderValues(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// HeaderValues returns every value of the metadata key name: the incoming
// metadata on a server, the outgoing metadata on a client.
func (r *call) HeaderValues(name string) []string {
	if !r.client {
		return metadata.ValueFromIncomingContext(r.parent, name)
	}
	if !r.outOK {
		r.out, _ = metadata.FromOutgoingContext(r.parent)
		r.outOK = true
	}
	return r.out.Get(name)
}

// Query is always "": gRPC has no query string.
func (r *call) Query(string) string { return "" }

// RemoteAddr is the transport peer of a server call, "" if the context has
// none, and always "" on a client.
func (r *call) RemoteAddr() string {
	if r.client {
		return ""
	}
	p, ok := peer.FromContext(r.parent)
	if !ok || p == nil || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok && a != nil && len(a.IP) > 0 {
		// As a.String(), in one allocation instead of three.
		if ap := a.AddrPort(); ap.Addr().IsValid() {
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			var buf [64]byte
			return string(ap.AppendTo(buf[:0]))
		}
	}
	return p.Addr.String()
}

// Request returns the keyfunc.Request view of the server call with context
// ctx and full method fullMethod, for key functions used outside the
// interceptors.
func Request(ctx context.Context, fullMethod string) keyfunc.Request {
	return &call{parent: ctx, method: fullMethod}
}

// callContext is the context of a limited server call: the parent context
// plus the Decision, for DecisionFrom.
type callContext call

type decisionKey struct{}

func (c *callContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *callContext) Done() <-chan struct{}       { return c.parent.Done() }
func (c *callContext) Err() error                  { return c.parent.Err() }
func (c *callContext) Value(key any) any {
	if _, ok := key.(decisionKey); ok && c.decided {
		return &c.d
	}
	return c.parent.Value(key)
}
func (c *callContext) String() string { return "grpclimit.Context" }

// DecisionFrom returns the Decision a server interceptor made for the call
// whose context is ctx (the unary handler's context, or the stream's
// Context()), when the call was limited and decided.
func DecisionFrom(ctx context.Context) (*core.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*core.Decision)
	return d, ok
}
