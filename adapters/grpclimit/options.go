package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

type config struct {
	def     *core.Limiter
	routes  map[string]*core.Limiter // full method or "/pkg.Service/"; nil: not limited
	message *core.Limiter
	key     keyfunc.Func
	cost    func(ctx context.Context, fullMethod string, req any) int64
	skip    func(ctx context.Context, fullMethod string) bool
	denied  func(ctx context.Context, fullMethod string, d *core.Decision) error
	onError func(ctx context.Context, fullMethod string, err error) error
	headers httplimit.HeaderConfig
	msgHdrs httplimit.HeaderConfig // headers without the Draft family, for trailers
	logger  *slog.Logger
}

// Option configures an interceptor. The same options, with the framework's
// own types, exist in every sluice adapter.
type Option func(*config)

// WithKey counts calls under f's identity instead of each policy's Key.
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.key = f } }

// WithCost sets the cost of a call (default 1; 0 also means 1). req is the
// request message of a unary call and each message checked by
// WithMessageLimit; it is nil when a stream opens.
func WithCost(f func(ctx context.Context, fullMethod string, req any) int64) Option {
	return func(c *config) { c.cost = f }
}

// WithSkip exempts the calls for which f returns true: they are neither
// counted nor given metadata, and their messages are not limited either.
func WithSkip(f func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithSkipMethods exempts methods by full name ("/pkg.Service/Method") or
// whole services ("/pkg.Service/"), for example
// "/grpc.health.v1.Health/". It panics on a malformed name.
func WithSkipMethods(methods ...string) Option {
	return func(c *config) {
		for _, m := range methods {
			c.route("WithSkipMethods", m, nil)
		}
	}
}

// WithMethodLimiter limits a full method ("/pkg.Service/Method") or a whole
// service ("/pkg.Service/") with l instead of the interceptor's limiter. An
// exact method wins over its service; a nil l leaves the method unlimited.
// It panics on a malformed name.
func WithMethodLimiter(method string, l *core.Limiter) Option {
	return func(c *config) { c.route("WithMethodLimiter", method, l) }
}

// WithMessageLimit also checks every message of a stream with l: each
// message received by a server stream (after it is read), each message sent
// by a client stream (before it is sent). A method exempted by WithSkip or
// WithSkipMethods is not checked. Unary interceptors ignore it.
func WithMessageLimit(l *core.Limiter) Option { return func(c *config) { c.message = l } }

// WithDeniedHandler builds the error a denied call ends with, instead of
// DeniedError(d). The rate-limit metadata and grpc-retry-pushback-ms are
// already set in the trailer when it runs (a server handler may add more
// with grpc.SetTrailer). A nil result means DeniedError(d).
func WithDeniedHandler(f func(ctx context.Context, fullMethod string, d *core.Decision) error) Option {
	return func(c *config) { c.denied = f }
}

// WithErrorHandler decides what a call the limiter could not decide (no
// identity, negative cost, store failure) gets: nil lets it through, an error
// ends it. The error should be a gRPC status with a generic message (see
// FailClosed); anything else is replaced by codes.Unavailable "rate limit
// unavailable", so that no store error text reaches the client.
func WithErrorHandler(f func(ctx context.Context, fullMethod string, err error) error) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the metadata families and the reset format, as for
// HTTP (httplimit.HeaderConfig). The zero value sends them all.
func WithHeaders(h httplimit.HeaderConfig) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided calls are logged when no error handler is
// set (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// FailClosed is an error handler (WithErrorHandler) that refuses calls the
// limiter could not decide with codes.Unavailable and a generic message.
func FailClosed(context.Context, string, error) error { return errUnavailable }

var errUnavailable = status.Error(codes.Unavailable, "rate limit unavailable")

func newConfig(fn string, l *core.Limiter, opts []Option) *config {
	c := &config{def: l}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	limited := l != nil || c.message != nil
	for _, rl := range c.routes {
		limited = limited || rl != nil
	}
	if !limited {
		panic("grpclimit." + fn + ": nil limiter and no WithMethodLimiter or WithMessageLimit: nothing to limit")
	}
	c.msgHdrs = c.headers
	c.msgHdrs.Omit |= httplimit.Draft
	return c
}

func (c *config) route(option, method string, l *core.Limiter) {
	if !validMethod(method) {
		panic(fmt.Sprintf("grpclimit.%s: %q is neither a full method (\"/pkg.Service/Method\") nor a service (\"/pkg.Service/\")", option, method))
	}
	if c.routes == nil {
		c.routes = map[string]*core.Limiter{}
	}
	c.routes[method] = l
}

// validMethod accepts "/service/method" and "/service/".
func validMethod(m string) bool {
	if len(m) < 3 || m[0] != '/' {
		return false
	}
	i := strings.IndexByte(m[1:], '/') + 1
	return i > 1 && strings.IndexByte(m[i+1:], '/') < 0
}

// limiter returns the limiter of a call's opening, and whether the call is
// exempt altogether.
func (c *config) limiter(ctx context.Context, method string) (l *core.Limiter, skip bool) {
	if c.skip != nil && c.skip(ctx, method) {
		return nil, true
	}
	if c.routes != nil {
		if l, ok := c.routes[method]; ok {
			return l, l == nil
		}
		if i := strings.LastIndexByte(method, '/'); i > 0 {
			if l, ok := c.routes[method[:i+1]]; ok {
				return l, l == nil
			}
		}
	}
	return c.def, false
}

// check decides one call or message.
func (c *config) check(l *core.Limiter, r *call, req any) (core.Decision, error) {
	call := core.Call{Key: c.key}
	if c.cost != nil {
		call.Cost = c.cost(r.parent, r.method, req)
	}
	return l.CheckWith(r.parent, r, call)
}

// undecided handles a call the limiter could not decide: nil lets it
// through.
func (c *config) undecided(ctx context.Context, method string, err error) error {
	if c.onError == nil {
		c.logger.LogAttrs(ctx, slog.LevelWarn, "sluice: gRPC call not rate limited",
			slog.String("method", method), slog.String("error", err.Error()))
		return nil
	}
	e := c.onError(ctx, method, err)
	if e == nil {
		return nil
	}
	if _, ok := e.(interface{ GRPCStatus() *status.Status }); !ok {
		return errUnavailable
	}
	return e
}

// deny returns the error of a denied call.
func (c *config) deny(ctx context.Context, method string, d *core.Decision) error {
	if c.denied != nil {
		if err := c.denied(ctx, method, d); err != nil {
			return err
		}
	}
	return DeniedError(d)
}
