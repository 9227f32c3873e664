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
	c := newConfig("UnaryServerInterceptor", l, opts)
	flows := c.unaryFlows()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lim, skip, err := c.limiter(ctx, info.FullMethod)
		if err != nil { // the skip callback panicked
			if err := c.undecided(ctx, info.FullMethod, err); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}
		if skip || lim == nil {
			return handler(ctx, req)
		}
		u := unary{r: &call{parent: ctx, method: info.FullMethod, msg: req}, handler: handler}
		err = flows[lim].Run(u)
		return u.r.resp, err
	}
}

// unary is a unary server call as the middleware flow sees it: its call
// (the view, the handler's context and the Decision, allocated once) and
// its handler.
type unary struct {
	r       *call
	handler grpc.UnaryHandler
}

// unaryFlow maps gRPC's unary server calls onto the middleware flow every
// sluice adapter runs (skip, cost, decide, gone, the error handler, the
// merge with an outer interceptor's Decision, metadata, deny, handler,
// refund).
type unaryFlow struct{ c *config }

type unaryFlows = map[*core.Limiter]*middleware.Flow[unary, *call, unaryFlow]

// unaryFlows returns a flow for each limiter the interceptor may apply.
// Skipping (WithSkip, WithSkipMethods) is decided before, with the limiter.
func (c *config) unaryFlows() unaryFlows {
	cfg := middleware.Config[unary, *call]{
		Key:    c.key,
		Denied: func(_ unary, r *call) error { return c.deny((*callContext)(r), r.method, r.decision(), r.took) },
		OnError: func(u unary, err error) (bool, error) {
			err = c.undecided(u.r.parent, u.r.method, err)
			return err == nil, err
		},
		Logger:  c.logger,
		Headers: c.headers,
	}
	if c.cost != nil {
		cfg.Cost = func(u unary) int64 { return c.cost(u.r.parent, u.r.method, u.r.msg) }
	}
	set := func(x *middleware.Config[unary, *call]) { *x = cfg }
	flows := unaryFlows{}
	for _, l := range append([]*core.Limiter{c.def}, slices.Collect(maps.Values(c.routes))...) {
		if l != nil && flows[l] == nil {
			flows[l] = middleware.New("grpclimit", l, unaryFlow{c}, set, nil)
		}
	}
	return flows
}

func (unaryFlow) Start(u unary) *call {
	u.r.at = time.Now()
	return u.r
}

func (unaryFlow) Earlier(u unary) *core.Decision {
	if outer := outerCall(u.r.parent); outer != nil {
		return outer.decision()
	}
	return nil
}

// Publish records the Decision; a denial's metadata go in the trailer at
// once (Trailers-Only: nothing in the header, or the client would neither
// retry nor honour the pushback), an admitted call's once its handler
// returns.
func (fw unaryFlow) Publish(u unary, r *call, d *core.Decision, _ *fieldfmt.Formatter) {
	r.publish(d, time.Now())
	if !d.Allowed {
		_ = grpc.SetTrailer(r.parent, denialMetadata(fw.c.headers, d, r.at, r.took))
	}
}

// Next runs the handler, with the context carrying the Decision when the
// call was decided, and sends the call's metadata.
func (fw unaryFlow) Next(u unary, r *call) error {
	ctx := r.parent
	if r.decided {
		ctx = (*callContext)(r)
	}
	resp, err := u.handler(ctx, r.msg)
	r.resp = resp
	if d, at, ok := r.sends(); ok {
		if f := format(fw.c.headers, d, at); f.N > 0 {
			attach(r.parent, grpc.ServerTransportStreamFromContext(r.parent), Metadata(f), err)
		}
	}
	return err
}

// Watch is Next; a call that returned an error counts as failed for the
// refund (as an HTTP status >= 400 would).
func (fw unaryFlow) Watch(u unary, r *call) (int, error) {
	if err := fw.Next(u, r); err != nil {
		return 500, err
	}
	return 200, nil
}

func (unaryFlow) Abort(unary) {}

// Unavailable ends a call whose client left before it was counted with its
// context's status.
func (unaryFlow) Unavailable(u unary) error {
	return status.FromContextError(u.r.parent.Err()).Err()
}

// attach sends an admitted call's metadata once its handler returned: in
// the header on success; in the trailer on error, which keeps a response
// without headers Trailers-Only (retryable). RateLimit and RateLimit-Policy
// never go out in a real HTTP/2 trailer, which the draft forbids: when the
// handler sent the header itself, they are dropped.
func attach(ctx context.Context, st grpc.ServerTransportStream, md metadata.MD, handlerErr error) {
	if handlerErr == nil {
		if grpc.SetHeader(ctx, md) == nil {
			return
		}
		dropDraft(md) // the handler sent the header itself: this is a real trailer
	} else if headerSent(st) {
		dropDraft(md)
	}
	_ = grpc.SetTrailer(ctx, md)
}

func dropDraft(md metadata.MD) {
	delete(md, MetadataRateLimit)
	delete(md, MetadataRateLimitPolicy)
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

// StreamServerInterceptor returns an interceptor that limits streams with l
// when they open (l may be nil when WithMethodLimiter or WithMessageLimit say
// what to limit), and, with WithMessageLimit, every message received. It
// panics if there is nothing to limit or an option is malformed.
func StreamServerInterceptor(l *core.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig("StreamServerInterceptor", l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		lim, skip, err := c.limiter(ctx, info.FullMethod)
		if err != nil {
			if err := c.undecided(ctx, info.FullMethod, err); err != nil {
				return err
			}
			return handler(srv, ss)
		}
		if skip || lim == nil && c.message == nil {
			return handler(srv, ss)
		}
		s := &serverStream{ServerStream: ss, c: c, r: call{parent: ctx, method: info.FullMethod}}
		if lim != nil {
			s.r.at = time.Now()
			d := &s.r.d
			err := c.check(lim, &s.r, nil, d)
			if err == nil && d.Degraded() && ctx.Err() != nil {
				err = ctx.Err() // the client left before its call was counted
			}
			if err != nil {
				if err := c.undecided(ctx, info.FullMethod, err); err != nil {
					return err
				}
			} else {
				view := d
				if outer := outerCall(ctx); outer != nil {
					view = core.Merge(outer.decision(), view) // stacked interceptors
				}
				s.r.publish(view, time.Now())
				if !d.Allowed {
					ss.SetTrailer(denialMetadata(c.headers, view, s.r.at, s.r.took))
					return c.deny(s.Context(), info.FullMethod, view, s.r.took)
				}
				s.pending = true
			}
		}
		err = handler(srv, s)
		s.finish(err)
		return err
	}
}

// serverStream is a limited server stream: its Context carries the
// Decision, the open decision's metadata rides on the first header sent, and
// with WithMessageLimit RecvMsg checks every message.
type serverStream struct {
	grpc.ServerStream
	c       *config
	r       call           // the view for key functions, and the context
	pending bool           // the open decision's metadata are not sent yet (see call.sends)
	msg     *core.Decision // the last message's decision, nil before one
	spare   *core.Decision // where the next message is decided
	msgAt   time.Time
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

func (s *serverStream) flushHeader() {
	if md := s.takeMetadata(); md != nil {
		_ = s.ServerStream.SetHeader(md)
	}
}

// takeMetadata returns the open decision's metadata if they are still to
// be sent by this stream, once.
func (s *serverStream) takeMetadata() metadata.MD {
	if !s.pending {
		return nil
	}
	s.pending = false
	d, at, ok := s.r.sends()
	if !ok {
		return nil
	}
	if f := format(s.c.headers, d, at); f.N > 0 {
		return Metadata(f)
	}
	return nil
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

// finish places the metadata that was not sent yet once the handler
// returned.
func (s *serverStream) finish(err error) {
	var trailer metadata.MD
	if err == nil {
		s.flushHeader()
	} else if trailer = s.takeMetadata(); trailer != nil {
		// Trailers-Only, unless the handler sent the header.
		if headerSent(grpc.ServerTransportStreamFromContext(s.r.parent)) {
			dropDraft(trailer)
		}
	}
	if s.msg != nil {
		trailer = Metadata(format(s.c.msgHdrs, s.msg, s.msgAt))
		if !s.msg.Allowed {
			trailer[MetadataPushback] = []string{Pushback(s.msg)}
		}
	}
	if trailer != nil {
		s.ServerStream.SetTrailer(trailer)
	}
}
