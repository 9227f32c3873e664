package grpclimit

import (
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
)

// UnaryServerInterceptor returns an interceptor that limits unary calls with
// l (nil when only WithMethodLimiter says what to limit). It panics if there
// is nothing to limit or an option is malformed.
func UnaryServerInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig("UnaryServerInterceptor", l, opts).withFlows()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		f, _, err := c.open(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if f == nil {
			return handler(ctx, req)
		}
		x := rpc{r: &call{parent: ctx, method: info.FullMethod, msg: req}, unary: handler}
		err = f.Run(x)
		return x.r.resp, err
	}
}

// StreamServerInterceptor returns an interceptor that limits streams with l
// when they open (l may be nil when WithMethodLimiter or WithMessageLimit say
// what to limit), and, with WithMessageLimit, every message received. It
// panics if there is nothing to limit or an option is malformed.
func StreamServerInterceptor(l *core.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig("StreamServerInterceptor", l, opts).withFlows()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		f, skip, err := c.open(ctx, info.FullMethod)
		if err != nil {
			return err
		}
		if skip || f == nil && c.message == nil {
			return handler(srv, ss)
		}
		s := &serverStream{ServerStream: ss, c: c, r: call{parent: ctx, method: info.FullMethod}}
		x := rpc{r: &s.r, stream: handler, ss: s, srv: srv}
		if f == nil { // only its messages are limited
			return serverFlow{c}.Next(x, x.r)
		}
		return f.Run(x)
	}
}

// rpc is a server call as the middleware flow sees it: its state (the view,
// the handler's context and the Decision, allocated once) and the handler
// it goes on to, a unary call's or a stream's.
type rpc struct {
	r      *call
	unary  grpc.UnaryHandler
	stream grpc.StreamHandler
	ss     *serverStream // a stream's, wrapped
	srv    any
}

// handle runs the call's handler, whose context carries the Decision once
// the call was decided.
func (x rpc) handle() error {
	if x.ss != nil {
		return x.stream(x.srv, x.ss)
	}
	ctx := x.r.parent
	if x.r.decided {
		ctx = (*callContext)(x.r)
	}
	var err error
	x.r.resp, err = x.unary(ctx, x.r.msg)
	return err
}

func (x rpc) setHeader(md metadata.MD) error {
	if x.ss != nil {
		return x.ss.ServerStream.SetHeader(md)
	}
	return grpc.SetHeader(x.r.parent, md)
}

func (x rpc) setTrailer(md metadata.MD) {
	if x.ss != nil {
		x.ss.ServerStream.SetTrailer(md)
		return
	}
	_ = grpc.SetTrailer(x.r.parent, md)
}

// place sends the metadata md of an admitted call once its handler
// returned: in the header on success; in the trailer on error, which keeps
// a response without headers Trailers-Only (retryable). RateLimit and
// RateLimit-Policy never go out in a real HTTP/2 trailer, which the draft
// forbids: when the handler sent the header itself, they are dropped. A
// stream's trailer carries its last message's decision (trailer) instead,
// when it has one.
func (x rpc) place(md, trailer metadata.MD, handlerErr error) {
	if md != nil && handlerErr == nil && x.setHeader(md) == nil {
		md = nil
	}
	if md != nil && trailer == nil {
		if handlerErr == nil || headerSent(grpc.ServerTransportStreamFromContext(x.r.parent)) {
			delete(md, MetadataRateLimit) // this is a real trailer
			delete(md, MetadataRateLimitPolicy)
		}
		trailer = md
	}
	if trailer != nil {
		x.setTrailer(trailer)
	}
}

// headerSent reports whether the header of a server call was sent already,
// so that its trailer is a real HTTP/2 trailer section rather than the one
// header block of a Trailers-Only response. grpc-go's transport stream
// refuses a send compressor once the header is out, and setting the one it
// has changes nothing; a stream that cannot tell counts as sent (the
// RateLimit fields are then left out rather than risked in a trailer).
func headerSent(st grpc.ServerTransportStream) bool {
	cs, ok := st.(interface {
		SendCompress() string
		SetSendCompress(string) error
	})
	if !ok {
		return true
	}
	return cs.SetSendCompress(cs.SendCompress()) != nil
}

// serverFlow maps gRPC's server calls, unary and stream alike, onto the
// middleware flow every sluice adapter runs (cost, decide, gone, the error
// handler, the merge with an outer interceptor's Decision, metadata, deny,
// handler, refund).
type serverFlow struct{ c *config }

// flow is the middleware flow of a server interceptor's limiter.
type flow = middleware.Flow[rpc, *call, serverFlow]

// withFlows builds a flow for each limiter a server interceptor may apply.
func (c *config) withFlows() *config {
	cfg := middleware.Config[rpc, *call]{
		Key:    c.key,
		Denied: func(_ rpc, r *call) error { return c.deny((*callContext)(r), r.method, r.decision(), r.took) },
		OnError: func(x rpc, err error) (bool, error) {
			err = c.undecided(x.r.parent, x.r.method, err)
			return err == nil, err
		},
		Logger:  c.logger,
		Headers: c.headers,
	}
	if c.cost != nil {
		cfg.Cost = func(x rpc) int64 { return c.cost(x.r.parent, x.r.method, x.r.msg) }
	}
	set := func(x *middleware.Config[rpc, *call]) { *x = cfg }
	c.flows = map[*core.Limiter]*flow{}
	for _, l := range append([]*core.Limiter{c.def}, slices.Collect(maps.Values(c.routes))...) {
		if l != nil && c.flows[l] == nil {
			c.flows[l] = middleware.New("grpclimit", l, serverFlow{c}, set, nil)
		}
	}
	return c
}

// open returns the flow of a server call's method, nil when the method has
// no limiter; skip is set when the call is exempt altogether (its messages
// too). A non-nil error ends the call: its skip callback panicked and the
// error handler refused it.
func (c *config) open(ctx context.Context, method string) (f *flow, skip bool, err error) {
	l, skip, err := c.limiter(ctx, method)
	if err != nil {
		return nil, true, c.undecided(ctx, method, err)
	}
	if skip || l == nil {
		return nil, skip, nil
	}
	return c.flows[l], false, nil
}

func (serverFlow) Start(x rpc) *call {
	x.r.at = time.Now()
	return x.r
}

func (serverFlow) Earlier(x rpc) *core.Decision {
	if outer := outerCall(x.r.parent); outer != nil {
		return outer.decision()
	}
	return nil
}

// Publish records the Decision; a denial's metadata go in the trailer at
// once (Trailers-Only: nothing in the header, or the client would neither
// retry nor honour the pushback), an admitted call's once its handler
// sends its header or returns.
func (fw serverFlow) Publish(x rpc, r *call, d *core.Decision, _ *fieldfmt.Formatter) {
	r.publish(d, time.Now())
	if !d.Allowed {
		x.setTrailer(denialMetadata(fw.c.headers, d, r.at, r.took))
	}
}

// Next runs the handler and places the metadata not sent yet.
func (fw serverFlow) Next(x rpc, r *call) error {
	err := x.handle()
	var trailer metadata.MD
	if x.ss != nil {
		trailer = x.ss.messageMetadata()
	}
	x.place(r.takeMetadata(fw.c.headers), trailer, err)
	return err
}

// Watch is Next; a call that returned an error counts as failed for the
// refund (as an HTTP status >= 400 would).
func (fw serverFlow) Watch(x rpc, r *call) (int, error) {
	if err := fw.Next(x, r); err != nil {
		return 500, err
	}
	return 200, nil
}

func (serverFlow) Abort(rpc) {}

// Unavailable ends a call whose client left before it was counted with its
// context's status.
func (serverFlow) Unavailable(x rpc) error {
	return status.FromContextError(x.r.parent.Err()).Err()
}

// serverStream is a limited server stream: its Context carries the
// Decision, the open decision's metadata ride on the first header sent, and
// with WithMessageLimit RecvMsg checks every message.
type serverStream struct {
	grpc.ServerStream
	c     *config
	r     call           // the view for key functions, and the context
	msg   *core.Decision // the last message's decision, nil before one
	spare *core.Decision // where the next message is decided
	msgAt time.Time
}

func (s *serverStream) Context() context.Context { return (*callContext)(&s.r) }

func (s *serverStream) SendHeader(md metadata.MD) error {
	s.flushHeader()
	return s.ServerStream.SendHeader(md)
}

func (s *serverStream) SendMsg(m any) error {
	s.flushHeader()
	return s.ServerStream.SendMsg(m)
}

// flushHeader adds the open decision's metadata to the header about to be
// sent. When the handler sent it already (grpc.SendHeader on its context),
// they stay for the trailer.
func (s *serverStream) flushHeader() {
	if md := s.r.takeMetadata(s.c.headers); md != nil && s.ServerStream.SetHeader(md) != nil {
		s.r.sent = false
	}
}

// RecvMsg reads a message and, with WithMessageLimit, checks it: a denied
// message is dropped and RecvMsg returns the denial.
func (s *serverStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.c.message == nil {
		return err
	}
	if s.spare == nil {
		s.spare = new(core.Decision)
	}
	if err := s.c.check(s.c.message, &s.r, m, s.spare); err != nil {
		return s.c.undecided(s.r.parent, s.r.method, err) // the last decision stays
	}
	s.msg, s.spare = s.spare, s.msg
	s.msgAt = time.Now()
	if !s.msg.Allowed {
		return s.c.deny(s.Context(), s.r.method, s.msg, 0)
	}
	return nil
}

// messageMetadata is the trailer of the last message's decision, nil
// before one: without the Draft fields, which trailers must not carry.
func (s *serverStream) messageMetadata() metadata.MD {
	if s.msg == nil {
		return nil
	}
	md := Metadata(format(s.c.msgHdrs, s.msg, s.msgAt))
	if !s.msg.Allowed {
		md[MetadataPushback] = []string{Pushback(s.msg)}
	}
	return md
}
