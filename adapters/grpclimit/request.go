package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// call is one gRPC call as the limiter sees it. A *call is the
// keyfunc.Request of the call (a pointer, so boxing it allocates nothing),
// and, as *callContext, the context handed to the server handler, which
// carries the Decision: one allocation serves both.
type call struct {
	parent  context.Context
	method  string
	msg     any         // the request message being decided, for Message
	client  bool        // outgoing call: Header reads the outgoing metadata
	out     metadata.MD // outgoing metadata, loaded on first use
	outOK   bool
	decided bool
	sent    bool // its metadata were taken (takeMetadata)
	d       core.Decision
	at      time.Time     // when the decision started, then when it was made
	took    time.Duration // how long the decision took, added to the waits sent
	resp    any           // the unary handler's response
	stacked *stacked      // nil unless sluice interceptors are stacked on the call
}

// stacked is what a call decided by stacked server interceptors (a global
// one, then a per-service one) shares with the others.
type stacked struct {
	// merged, in an inner call, is the Decision its handler sees: its own
	// merged with the outer ones' (middleware.Merge).
	merged *core.Decision
	// sender, in an inner call, is the outermost call, which sends the
	// metadata of the merge once the handler returns.
	sender *call
	// view, in the outermost call, is the innermost merge, decided at at,
	// whose metadata it sends instead of its own (none when it is a
	// denial, which carries them).
	view *core.Decision
	at   time.Time
}

// outerCall returns the call of an outer sluice server interceptor that
// decided the call of ctx, or nil.
func outerCall(ctx context.Context) *call {
	outer, _ := ctx.Value(callKey{}).(*call)
	return outer
}

// Decision is where the call's own Decision is decided, for the middleware
// flow.
func (r *call) Decision() *core.Decision { return &r.d }

// decision is the Decision a handler sees: the merge, under stacked
// interceptors, else the call's own.
func (r *call) decision() *core.Decision {
	if r.stacked != nil && r.stacked.merged != nil {
		return r.stacked.merged
	}
	return &r.d
}

// publish records that r was decided at now, its handler seeing view (r.d,
// or its merge with an outer interceptor's Decision). Under stacked
// interceptors, the outermost call then sends the metadata of view.
func (r *call) publish(view *core.Decision, now time.Time) {
	r.decided, r.took, r.at = true, now.Sub(r.at), now
	outer := outerCall(r.parent)
	if outer == nil {
		return
	}
	sender := outer
	if outer.stacked != nil && outer.stacked.sender != nil {
		sender = outer.stacked.sender
	}
	r.stacked = &stacked{merged: view, sender: sender}
	if sender.stacked == nil {
		sender.stacked = &stacked{}
	}
	sender.stacked.view, sender.stacked.at = view, now
}

// takeMetadata returns, once, the metadata r's interceptor sends when the
// handler sends its header or returns: those of its own Decision, or under
// stacked interceptors of the innermost merge (none when that is a denial:
// the denial carries them); nil when an outer interceptor sends them or r
// was not decided.
func (r *call) takeMetadata(h ratelimitfields.Config) metadata.MD {
	d, at := &r.d, r.at
	if s := r.stacked; s != nil && s.sender != nil {
		return nil
	} else if s != nil && s.view != nil {
		d, at = s.view, s.at
	}
	if r.sent || !r.decided || !d.Allowed {
		return nil
	}
	r.sent = true
	if f := format(h, d, at); f.N > 0 {
		return Metadata(f)
	}
	return nil
}

// Message returns the request message a server or client interceptor is
// deciding, for key functions (WithKey, a policy's Key) and WithCost alike:
// the request of a unary call, or, with WithMessageLimit, the stream
// message being checked. ok is false when there is none: a stream as it
// opens, or a view from Request. Route (and Path) of the same view is the
// full method, so keying a login call by its user name is one line:
//
//	func(r keyfunc.Request) (string, error) { m, _ := grpclimit.Message(r); return m.(*pb.LoginRequest).GetUsername(), nil }
//
// KeyFunc does the same with the interceptor's own arguments.
func Message(r keyfunc.Request) (msg any, ok bool) {
	if c, ok := asCall(r); ok && c.msg != nil {
		return c.msg, true
	}
	return nil, false
}

// KeyFunc returns a key function that keys a call by f of its context,
// full method and request message (as WithCost sees them; req is nil when
// a stream opens): a login limit keyed by the user name is
//
//	grpclimit.KeyFunc(func(_ context.Context, _ string, req any) (string, error) { return req.(*pb.LoginRequest).GetUsername(), nil })
//
// An empty key means the call has none (keyfunc.ErrNoKey). The Func works
// only on calls of this package's interceptors (and views from Request).
func KeyFunc(f func(ctx context.Context, fullMethod string, req any) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("grpclimit", "KeyFunc", asCall, func(_ keyfunc.Request, c *call) (string, error) { return f(c.parent, c.method, c.msg) })
}

func asCall(r keyfunc.Request) (*call, bool) { c, ok := r.(*call); return c, ok }

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
	if p, ok := peer.FromContext(r.parent); ok && p != nil && p.Addr != nil {
		return middleware.AddrString(p.Addr)
	}
	return ""
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

// callKey is the context key under which a decided server call finds the
// call of an outer sluice interceptor, to stack on it.
type callKey struct{}

func (c *callContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *callContext) Done() <-chan struct{}       { return c.parent.Done() }
func (c *callContext) Err() error                  { return c.parent.Err() }
func (c *callContext) Value(key any) any {
	switch key.(type) {
	case decisionKey:
		if c.decided {
			return (*call)(c).decision()
		}
	case callKey:
		if c.decided && !c.client {
			return (*call)(c)
		}
	}
	return c.parent.Value(key)
}
func (c *callContext) String() string { return "grpclimit.Context" }

// DecisionFrom returns the Decision a server interceptor made for the call
// whose context is ctx (the unary handler's context, or the stream's
// Context()), when the call was limited and decided; under stacked sluice
// interceptors (a global one, then a per-service one), the merge of theirs
// (allowed only if both allowed, the most constraining policy binding). In a denied handler (WithDeniedHandler) it is the denied
// Decision: the call's, or on a stream the message's.
func DecisionFrom(ctx context.Context) (*core.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*core.Decision)
	return d, ok
}
