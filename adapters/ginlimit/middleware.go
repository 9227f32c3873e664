package ginlimit

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// DecisionKey is the gin.Context key under which the middleware stores the
// *core.Decision (c.Get(DecisionKey)); DecisionFrom reads it.
const DecisionKey = "sluice.decision"

type config = middleware.Config[*gin.Context, *call]

// Option configures the middleware. Every sluice adapter has the same
// options, with its framework's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one route group, the client IP on
// another). KeyFunc builds one from a function of the *gin.Context.
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.Key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(*gin.Context) int64) Option { return func(c *config) { c.Cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*gin.Context) bool) Option { return func(c *config) { c.Skip = f } }

// WithDeniedHandler answers denied requests instead of DeniedHandler. The
// rate-limit headers are already set and the Decision is stored when h runs;
// the chain is aborted after it (h may call c.Next to let the request
// through anyway, as a shadow mode would).
func WithDeniedHandler(h gin.HandlerFunc) Option {
	return func(c *config) { c.Denied = func(gc *gin.Context, _ *call) error { h(gc); return nil } }
}

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns true to let it continue to the next handler uncounted, or false
// when it has answered the request itself (the chain is then aborted).
// Without it the request continues and the error is logged, at most once a
// second. Every sluice adapter has this option: the framework's request and
// the error in, whether to continue out (with the handler's error, in
// frameworks whose handlers return one).
func WithErrorHandler(f func(c *gin.Context, err error) (proceed bool)) Option {
	return func(c *config) { c.OnError = func(gc *gin.Context, err error) (bool, error) { return f(gc, err), nil } }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.Headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New returns gin middleware that limits requests with l. It panics if l is
// nil. Stacked on a route under another sluice middleware (a global one),
// its Decision and headers are merged with the earlier one's: allowed only
// if both allowed, the most constraining policy of either binding (see
// docs/policies.md, "One Limiter with Match, or stacked middlewares").
func New(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	f := middleware.New("ginlimit", l, flow{}, WithDeniedHandler(DeniedHandler), opts)
	return func(gc *gin.Context) { _ = f.Run(gc) }
}

// flow maps gin onto the middleware flow.
type flow struct{}

func (flow) Start(gc *gin.Context) *call { return &call{request: (*request)(gc)} }

func (flow) Earlier(gc *gin.Context) *core.Decision { d, _ := DecisionFrom(gc); return d }

func (flow) Publish(gc *gin.Context, r *call, d *core.Decision, f *fieldfmt.Formatter) {
	gc.Request = middleware.PublishHTTP(&r.s, f, gc.Writer.Header(), gc.Request, d)
	gc.Set(DecisionKey, d)
}

func (flow) Next(gc *gin.Context, _ *call) error { gc.Next(); return nil }

func (flow) Watch(gc *gin.Context, _ *call) (int, error) { gc.Next(); return gc.Writer.Status(), nil }

func (flow) Abort(gc *gin.Context) { gc.Abort() }

func (flow) Unavailable(gc *gin.Context) error {
	gc.AbortWithStatus(http.StatusServiceUnavailable)
	return nil
}

// call is the state of one request the middleware decides: the view and
// its Scratch, in one allocation.
type call struct {
	*request
	s httpfields.Scratch
}

func (r *call) gc() *gin.Context         { return (*gin.Context)(r.request) }
func (r *call) Decision() *core.Decision { return &r.s.Decision }

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with the RFC 9457 problem+json body of ratelimitfields.Problem,
// and the chain aborted. Call it from a custom denied handler to keep the
// standard body.
func DeniedHandler(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusTooManyRequests, ratelimitfields.ProblemContentType, middleware.ProblemFor(DecisionFrom(c)))
	c.Abort()
}

// DecisionFrom returns the Decision the middleware made for this request:
// under stacked sluice middlewares, the merge of theirs (see New).
func DecisionFrom(c *gin.Context) (*core.Decision, bool) {
	v, _ := c.Get(DecisionKey)
	return middleware.DecisionOf(v)
}

// request is the keyfunc.Request view of a *gin.Context: a pointer, so it
// fits an interface without an allocation.
type request gin.Context

func (r *request) Context() context.Context { return r.Request.Context() }
func (r *request) Method() string           { return r.Request.Method }

// Route is the route template that matched ("/users/:id"), or the path when
// no route did (404s, which run the engine's global middleware).
func (r *request) Route() string {
	return middleware.Or((*gin.Context)(r).FullPath(), r.Request.URL.Path)
}

// Path is the path as gin's router matched it. When a route matched (global
// middleware runs after routing), it is the request path if that is one the
// route template matches, else the path as gin cleans it (RemoveExtraSlash),
// else the template itself: a variant of a path that reached a route's
// handlers is counted as that route. When no route matched, it is the
// cleaned path.
func (r *request) Path() string {
	p := middleware.RoutedPath(r.Request.URL)
	return middleware.TemplatePath((*gin.Context)(r).FullPath(), p, middleware.CleanPath(p), middleware.CleanPath(r.Request.URL.Path))
}

func (r *request) Header(name string) string         { return r.Request.Header.Get(name) }
func (r *request) HeaderValues(name string) []string { return r.Request.Header.Values(name) }
func (r *request) Query(name string) string          { return (*gin.Context)(r).Query(name) }
func (r *request) RemoteAddr() string                { return r.Request.RemoteAddr }

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware.
func Request(c *gin.Context) keyfunc.Request { return (*request)(c) }

// Context returns the *gin.Context of a request the middleware (or
// Request) viewed, for a key function that needs more than the view: a
// login limit keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { c, _ := ginlimit.Context(r); return c.PostForm("username"), nil }
//
// It reports false for any other keyfunc.Request.
func Context(r keyfunc.Request) (*gin.Context, bool) {
	switch v := r.(type) {
	case *call:
		return v.gc(), true
	case *request:
		return (*gin.Context)(v), true
	}
	return nil, false
}

// FrameworkIP returns a key function that keys a request by gin's
// c.ClientIP(), for apps whose engine already knows its proxies. IPv6
// clients are grouped by /64 and IPv4-mapped addresses folded, as
// keyfunc.IP does; a value that is not an IP address falls back to the
// transport peer. Every sluice adapter for a framework with its own idea of
// the client address has a FrameworkIP.
//
// WARNING: with gin's defaults the client chooses this key. A gin.Engine
// trusts every proxy (0.0.0.0/0 and ::/0) and ForwardedByClientIP is on, so
// c.ClientIP() is the leftmost X-Forwarded-For entry, which any client can
// write, getting a fresh bucket per request. Use it only after
// engine.SetTrustedProxies names your proxies (or nil to ignore headers), or
// with engine.TrustedPlatform set to a header your edge overwrites. Without
// proxies, prefer keyfunc.IP(), which reads the transport peer and walks
// forwarding headers only from proxies you trust.
func FrameworkIP() keyfunc.Func {
	return middleware.KeyFunc("ginlimit", "FrameworkIP", Context, func(r keyfunc.Request, c *gin.Context) (string, error) {
		return middleware.FrameworkIP(r, c.ClientIP())
	})
}

// KeyFunc returns a key function that keys a request by f of its
// *gin.Context: a login limit keyed by the form's username is
//
//	ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.PostForm("username"), nil })
//
// An empty key means the request has none (core.ErrNoKey). The Func works
// only on requests of this package's middleware.
func KeyFunc(f func(*gin.Context) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("ginlimit", "KeyFunc", Context, func(_ keyfunc.Request, c *gin.Context) (string, error) { return f(c) })
}
