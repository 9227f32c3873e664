package grpclimit

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/core"
)

// UnaryClientInterceptor returns an interceptor that decides each outgoing
// unary call with l before it is sent: a denied call returns DeniedError (or
// the WithDeniedHandler error) without calling the invoker. It panics if
// there is nothing to limit or an option is malformed.
func UnaryClientInterceptor(l *core.Limiter, opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig("UnaryClientInterceptor", l, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		lim, _, err := c.limiter(ctx, method)
		if err != nil {
			if err := c.undecided(ctx, method, err); err != nil {
				return err
			}
		} else if lim != nil {
			if err := c.outgoing(lim, &call{parent: ctx, method: method, client: true}, req, callOpts); err != nil {
				return err
			}
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor returns an interceptor that decides each outgoing
// stream with l before it is opened and, with WithMessageLimit, each message
// before it is sent. It panics if there is nothing to limit or an option is
// malformed.
func StreamClientInterceptor(l *core.Limiter, opts ...Option) grpc.StreamClientInterceptor {
	c := newConfig("StreamClientInterceptor", l, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		lim, skip, err := c.limiter(ctx, method)
		if err != nil {
			if err := c.undecided(ctx, method, err); err != nil {
				return nil, err
			}
			return streamer(ctx, desc, cc, method, callOpts...)
		}
		if skip {
			return streamer(ctx, desc, cc, method, callOpts...)
		}
		if lim != nil {
			if err := c.outgoing(lim, &call{parent: ctx, method: method, client: true}, nil, callOpts); err != nil {
				return nil, err
			}
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil || c.message == nil {
			return cs, err
		}
		return &clientStream{ClientStream: cs, c: c, r: call{parent: ctx, method: method, client: true}}, nil
	}
}

// outgoing decides an outgoing call or message; an error ends it. A denial
// fills the grpc.Trailer call options as a server's denial would.
func (c *config) outgoing(lim *core.Limiter, r *call, req any, callOpts []grpc.CallOption) error {
	d := &r.d
	err := c.check(lim, r, req, d)
	if err == nil && !d.Allowed && c.wait {
		err = c.await(lim, r, req, d)
	}
	if err != nil {
		return c.undecided(r.parent, r.method, err)
	}
	if d.Allowed {
		return nil
	}
	if len(callOpts) > 0 {
		md := denialMetadata(c.headers, d, time.Now(), 0)
		for _, o := range callOpts {
			if t, ok := o.(grpc.TrailerCallOption); ok && t.TrailerAddr != nil {
				*t.TrailerAddr = md.Copy()
			}
		}
	}
	return c.deny(r.parent, r.method, d, 0)
}

// clientStream checks each message before sending it.
type clientStream struct {
	grpc.ClientStream
	c *config
	r call
}

// SendMsg sends m unless the message limiter denies it; a denied message is
// not sent and the stream stays open.
func (s *clientStream) SendMsg(m any) error {
	if err := s.c.outgoing(s.c.message, &s.r, m, nil); err != nil {
		return err
	}
	return s.ClientStream.SendMsg(m)
}
