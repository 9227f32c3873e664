package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// UnaryServerInterceptor returns an interceptor that limits unary calls with
// l (nil when only WithMethodLimiter says what to limit). It panics if there
// is nothing to limit or an option is malformed.
func UnaryServerInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig("UnaryServerInterceptor", l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lim, _, err := c.limiter(ctx, info.FullMethod)
		if lim == nil && err == nil {
			return handler(ctx, req)
		}
		r := &call{parent: ctx, method: info.FullMethod}
		var d core.Decision
		start := time.Now()
		if err == nil {
			d, err = c.check(lim, r, req)
		}
		if err == nil && d.Degraded() && ctx.Err() != nil {
			err = ctx.Err() // the client left before its call was counted: it does not run
		}
		if err != nil {
			if err := c.undecided(ctx, info.FullMethod, err); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}
		r.d, r.decided = d, true
		view := r.stack()
		now := time.Now()
		if !d.Allowed {
			// Trailers-Only: nothing in the header, or the client would not
			// retry nor honour the pushback.
			took := now.Sub(start)
			_ = grpc.SetTrailer(ctx, denialMetadata(c.headers, view, now, took))
			return nil, c.deny((*callContext)(r), info.FullMethod, view, took)
		}
		f := r.send(c.headers.Format(view, now))
		resp, err := handler((*callContext)(r), req)
		if f := r.pending(&f); f.N > 0 {
			attach(ctx, grpc.ServerTransportStreamFromContext(ctx), Metadata(*f), err)
		}
		refund(ctx, c, lim, &r.d, err)
		return resp, err
	}
}

// refund gives a call back to the policies that do not count failed (or
// successful) calls: a call that returned an error counts as failed (as an
// HTTP status >= 400 would).
func refund(ctx context.Context, c *config, l *core.Limiter, d *core.Decision, err error) {
	if !d.Refundable() {
		return
	}
	status := 200
	if err != nil {
		status = 500
	}
	if rerr := l.Refund(context.WithoutCancel(ctx), d, status); rerr != nil {
		c.refunds.RefundFailed(ctx, rerr)
	}
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
			start := time.Now()
			d, err := c.check(lim, &s.r, nil)
			if err == nil && d.Degraded() && ctx.Err() != nil {
				err = ctx.Err() // the client left before its call was counted
			}
			if err != nil {
				if err := c.undecided(ctx, info.FullMethod, err); err != nil {
					return err
				}
			} else {
				s.r.d, s.r.decided = d, true
				view := s.r.stack()
				now := time.Now()
				if !d.Allowed {
					took := now.Sub(start)
					ss.SetTrailer(denialMetadata(c.headers, view, now, took))
					return c.deny(s.Context(), info.FullMethod, view, took)
				}
				s.header = s.r.send(c.headers.Format(view, now))
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
	c      *config
	r      call                   // the view for key functions, and the context
	header ratelimitfields.Fields // the open decision's metadata, until sent (see call.pending)
	msg    core.Decision          // the last message's decision
	msgAt  time.Time
	msgSet bool
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
	if f := s.r.pending(&s.header); f.N > 0 {
		_ = s.ServerStream.SetHeader(Metadata(*f))
		f.N = 0
	}
}

// RecvMsg reads a message and, with WithMessageLimit, checks it: a denied
// message is dropped and RecvMsg returns the denial.
func (s *serverStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.c.message == nil {
		return err
	}
	d, err := s.c.check(s.c.message, &s.r, m)
	if err != nil {
		return s.c.undecided(s.r.parent, s.r.method, err)
	}
	s.msg, s.msgAt, s.msgSet = d, time.Now(), true
	if !d.Allowed {
		return s.c.deny(s.Context(), s.r.method, &d, 0)
	}
	return nil
}

// finish places the metadata that was not sent yet once the handler
// returned.
func (s *serverStream) finish(err error) {
	var trailer metadata.MD
	if f := s.r.pending(&s.header); f.N > 0 {
		if err == nil {
			s.flushHeader()
		} else {
			trailer = Metadata(*f) // Trailers-Only, unless the handler sent the header
			if headerSent(grpc.ServerTransportStreamFromContext(s.r.parent)) {
				dropDraft(trailer)
			}
		}
	}
	if s.msgSet {
		trailer = Metadata(s.c.msgHdrs.Format(&s.msg, s.msgAt))
		if !s.msg.Allowed {
			trailer[MetadataPushback] = []string{Pushback(&s.msg)}
		}
	}
	if trailer != nil {
		s.ServerStream.SetTrailer(trailer)
	}
}
