package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

type config struct {
	def     *core.Limiter
	routes  map[string]*core.Limiter // full method or "/pkg.Service/"; nil: not limited
	message *core.Limiter
	key     keyfunc.Func
	cost    func(ctx context.Context, fullMethod string, req any) int64
	skip    func(ctx context.Context, fullMethod string) bool
	denied  func(ctx context.Context, fullMethod string) error
	onError func(ctx context.Context, fullMethod string, err error) (bool, error)
	headers ratelimitfields.Config
	msgHdrs ratelimitfields.Config // headers without the Draft family, for trailers
	logger  *slog.Logger
	undec   *middleware.Logger      // undecided calls, at most a line a second
	wait    bool                    // client interceptors wait for a slot (WithWait)
	flows   map[*core.Limiter]*flow // a server interceptor's, by limiter
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

// WithDeniedHandler builds the error a denied call (or, with
// WithMessageLimit, message) ends with, instead of DeniedError(d): the
// call's context and full method in, as every sluice adapter's denied
// handler gets the framework's request, with the denied Decision in ctx
// (DecisionFrom). The rate-limit metadata and grpc-retry-pushback-ms are
// already set in the trailer when it runs (a server handler may add more
// with grpc.SetTrailer). A nil result means DeniedError(d).
func WithDeniedHandler(f func(ctx context.Context, fullMethod string) error) Option {
	return func(c *config) { c.denied = f }
}

// WithErrorHandler decides what a call the limiter could not decide gets (a
// store failure, a negative cost, a key function or callback that
// panicked): f returns proceed true to let it through uncounted, or false to
// end it with rerr. rerr should be a gRPC status with a generic message (see
// FailClosed); anything else, nil included, is replaced by
// codes.Unavailable "rate limit unavailable", so that no store error text
// reaches the client. Without it the call proceeds and the error is logged,
// at most once a second. Every sluice adapter has this option, with this
// shape: the call, the error, and whether to continue.
func WithErrorHandler(f func(ctx context.Context, fullMethod string, err error) (proceed bool, rerr error)) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the metadata families and the reset format, as for
// HTTP (ratelimitfields.Config). The zero value sends them all.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided calls and failed refunds are logged
// (default slog.Default()), each kind at most once a second, with the number
// of lines dropped since the last one.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// FailClosed is an error handler (WithErrorHandler) that refuses calls the
// limiter could not decide with codes.Unavailable and a generic message.
func FailClosed(context.Context, string, error) (bool, error) { return false, errUnavailable }

var errUnavailable = status.Error(codes.Unavailable, "rate limit unavailable")

func newConfig(fn string, l *core.Limiter, opts []Option) *config {
	c := &config{def: l}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	c.undec = middleware.NewLogger(c.logger)
	limited := l != nil || c.message != nil
	for _, rl := range c.routes {
		limited = limited || rl != nil
	}
	if !limited {
		panic("grpclimit." + fn + ": nil limiter and no WithMethodLimiter or WithMessageLimit: nothing to limit")
	}
	c.msgHdrs = c.headers
	c.msgHdrs.Omit |= ratelimitfields.Draft
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
// exempt altogether. err is a skip callback that panicked.
func (c *config) limiter(ctx context.Context, method string) (l *core.Limiter, skip bool, err error) {
	if c.skip != nil {
		if skip, err := middleware.Skip(func(ctx context.Context) bool { return c.skip(ctx, method) }, ctx); skip || err != nil {
			return nil, skip, err
		}
	}
	l, ok := c.routes[method] // an exact method wins over its service
	if i := strings.LastIndexByte(method, '/'); !ok && i > 0 {
		l, ok = c.routes[method[:i+1]]
	}
	if ok {
		return l, l == nil, nil
	}
	return c.def, false, nil
}

// check decides one call or message into d (a stream's or client's; a
// unary server call runs the middleware flow instead). A panic in the cost
// callback, a key function or a hook becomes an error: grpc-go does not
// recover handlers, so it would take the process down.
func (c *config) check(l *core.Limiter, r *call, req any, d *core.Decision) error {
	r.msg = req
	defer func() { r.msg = nil }() // the message is the caller's: do not keep it
	cc := core.Call{Key: c.key}
	if c.cost != nil {
		var err error
		if cc.Cost, err = middleware.Cost(func(r *call) int64 { return c.cost(r.parent, r.method, r.msg) }, r); err != nil {
			return err
		}
	}
	return middleware.Decide(r.parent, l, r, cc, d)
}

// undecided handles a call the limiter could not decide: nil lets it
// through. A call whose client has gone is ended (it was not counted).
func (c *config) undecided(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if c.onError == nil {
		c.undec.Undecided(ctx, err, slog.String("method", method))
		return nil
	}
	proceed, e := c.onError(ctx, method, err)
	if proceed {
		return nil
	}
	if _, ok := e.(interface{ GRPCStatus() *status.Status }); !ok || e == nil {
		return errUnavailable
	}
	return e
}

// deny returns the error of a denied call or message, whose Decision is d
// and context ctx. took is how long the decision took, added to the waits
// sent.
func (c *config) deny(ctx context.Context, method string, d *core.Decision, took time.Duration) error {
	if c.denied != nil {
		if got, ok := DecisionFrom(ctx); !ok || got != d {
			// A client call or a stream message: the denied handler finds
			// d in its context all the same.
			ctx = (*callContext)(&call{parent: ctx, method: method, decided: true, stacked: &stacked{merged: d}})
		}
		if err := c.denied(ctx, method); err != nil {
			return err
		}
	}
	return deniedStatus(d, took).Err()
}
