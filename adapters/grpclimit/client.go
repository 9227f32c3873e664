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
		if _, err := c.send(ctx, method, req, callOpts); err != nil {
			return err
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
		skip, err := c.send(ctx, method, nil, callOpts)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil || skip || c.message == nil {
			return cs, err
		}
		return &clientStream{ClientStream: cs, c: c, r: call{parent: ctx, method: method, client: true}}, nil
	}
}

// send decides an outgoing call with its method's limiter before it is
// sent; an error ends it. skip is set when the call is exempt altogether
// (its messages too).
func (c *config) send(ctx context.Context, method string, req any, callOpts []grpc.CallOption) (skip bool, err error) {
	lim, skip, err := c.limiter(ctx, method)
	if err != nil {
		return true, c.undecided(ctx, method, err)
	}
	if skip || lim == nil {
		return skip, nil
	}
	return false, c.outgoing(lim, &call{parent: ctx, method: method, client: true}, req, callOpts)
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
