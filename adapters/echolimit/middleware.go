package echolimit

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// DecisionKey is the echo.Context key under which the middleware stores the
// *core.Decision (c.Get(DecisionKey)); DecisionFrom reads it.
const DecisionKey = "sluice.decision"

type config = middleware.Config[ctx, *request]

// Option configures the middleware. Every sluice adapter has the same
// options, with its framework's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one group, the client IP on another).
// Context(r) gives f the echo.Context.
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.Key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(echo.Context) int64) Option {
	return func(c *config) { c.Cost = func(x ctx) int64 { return f(x.c) } }
}

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers. A middleware.Skipper fits.
func WithSkip(f func(echo.Context) bool) Option {
	return func(c *config) { c.Skip = func(x ctx) bool { return f(x.c) } }
}

// WithDeniedHandler answers denied requests instead of DeniedHandler; the
// middleware returns what h returns, and the handler does not run. The
// rate-limit headers are already set and the Decision stored (DecisionFrom)
// when h runs.
func WithDeniedHandler(h echo.HandlerFunc) Option {
	return func(c *config) { c.Denied = func(x ctx, _ *request) error { return h(x.c) } }
}

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns proceed true to let it continue to the next handler uncounted, or
// false to end it, with rerr as the middleware's result (an *echo.HTTPError
// such as echo.ErrServiceUnavailable for Echo's error handler to write, or
// nil when f wrote the response). Without it the request continues and the
// error is logged, at most once a second. Every sluice adapter has this
// option: the framework's request and the error in, whether to continue
// out (with the handler's error, in frameworks whose handlers return one).
func WithErrorHandler(f func(c echo.Context, err error) (proceed bool, rerr error)) Option {
	return func(c *config) { c.OnError = func(x ctx, err error) (bool, error) { return f(x.c, err) } }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.Headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New returns Echo middleware that limits requests with l. Register it with
// e.Use or on a group or route, not with e.Pre: route templates are known
// only after routing. New panics if l is nil. Stacked on a route under
// another sluice middleware (a global one), its Decision and headers are
// merged with the earlier one's: allowed only if both allowed, the most
// constraining policy of either binding (see docs/policies.md, "One Limiter
// with Match, or stacked middlewares").
func New(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	f := middleware.New("echolimit", l, flow{}, WithDeniedHandler(DeniedHandler), opts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return f.Run(ctx{c, next}) }
	}
}

// ctx is a request and the rest of its chain.
type ctx struct {
	c    echo.Context
	next echo.HandlerFunc
}

// flow maps Echo onto the middleware flow.
type flow struct{}

func (flow) Start(x ctx) *request { return &request{c: x.c} }

func (flow) Earlier(x ctx) *core.Decision { d, _ := DecisionFrom(x.c); return d }

func (flow) Publish(x ctx, r *request, d *core.Decision, f *fieldfmt.Formatter) {
	x.c.SetRequest(middleware.PublishHTTP(&r.s, f, x.c.Response().Header(), x.c.Request(), d))
	x.c.Set(DecisionKey, d)
}

func (flow) Next(x ctx, _ *request) error { return x.next(x.c) }

func (flow) Watch(x ctx, _ *request) (int, error) {
	err := x.next(x.c)
	if res := x.c.Response(); res.Committed || err == nil {
		return res.Status, err
	}
	if he, ok := err.(*echo.HTTPError); ok {
		return he.Code, err // the error handler has not written it yet
	}
	return http.StatusInternalServerError, err
}

func (flow) Abort(ctx) {}

func (flow) Unavailable(ctx) error { return echo.ErrServiceUnavailable }

// DeniedHandler is the default answer to a denied request. It writes nothing:
// it returns an *echo.HTTPError with Code 429 for the request to take Echo's
// error path, so that e.HTTPErrorHandler, logging and error middleware see
// the denial like any other error. The error's Message marshals to the RFC
// 9457 problem document of ratelimitfields.Problem. When Echo's
// DefaultHTTPErrorHandler writes that 429 (directly, or called by a custom
// handler that passes the error on), the response is labelled
// application/problem+json, for HEAD requests too, as in every other
// adapter; a custom HTTPErrorHandler that renders the error its own way
// keeps its own Content-Type (the Message's String is "Too Many
// Requests"). Every 429 of the request gets Cache-Control: no-store unless
// the handler set one. The rate-limit headers are already set.
func DeniedHandler(c echo.Context) error {
	p := &middleware.Problem{Body: middleware.ProblemFor(DecisionFrom(c))}
	res, head := c.Response(), c.Request().Method == http.MethodHead
	// Echo's DefaultHTTPErrorHandler writes the problem document itself as
	// the body (or no body, for HEAD); a custom handler may write anything.
	res.Before(func() { p.Label(res.Header(), res.Status, head, "/echo/v4.(*Echo).DefaultHTTPErrorHandler") })
	return &echo.HTTPError{Code: http.StatusTooManyRequests, Message: p}
}

// DecisionFrom returns the Decision the middleware made for this request:
// under stacked sluice middlewares, the merge of theirs (see New).
func DecisionFrom(c echo.Context) (*core.Decision, bool) {
	return middleware.DecisionOf(c.Get(DecisionKey))
}

// request is the keyfunc.Request view of an echo.Context. echo.Context is an
// interface, so the view is a pointer to a struct holding it; the middleware
// keeps the request's Scratch (its Decision, context, request and header
// values) in the same allocation.
type request struct {
	c echo.Context
	s httpfields.Scratch
}

func (r *request) Context() context.Context { return r.c.Request().Context() }
func (r *request) Method() string           { return r.c.Request().Method }

// Route is the route template that matched ("/users/:id"), or the path when
// no route did.
func (r *request) Route() string { return middleware.Or(r.c.Path(), r.c.Request().URL.Path) }

// Path is the path as Echo's router matched it: the request path as Echo
// routes it (RawPath when set), when the matched route template matches
// that path; else the template itself, so that a variant of a path that
// reached a route's handlers is counted as that route. When no route
// matched, it is the cleaned path.
func (r *request) Path() string {
	u := r.c.Request().URL
	return middleware.TemplatePath(r.c.Path(), middleware.RoutedPath(u), u.Path)
}

func (r *request) Header(name string) string         { return r.c.Request().Header.Get(name) }
func (r *request) HeaderValues(name string) []string { return r.c.Request().Header.Values(name) }
func (r *request) Query(name string) string          { return r.c.QueryParam(name) }
func (r *request) RemoteAddr() string                { return r.c.Request().RemoteAddr }

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware.
func Request(c echo.Context) keyfunc.Request { return &request{c: c} }

// Decision is where the middleware decides the request's Decision.
func (r *request) Decision() *core.Decision { return &r.s.Decision }
func (r *request) ec() echo.Context         { return r.c }

// Context returns the echo.Context of a request the middleware (or
// Request) viewed, for a key function that needs more than the view: a
// login limit keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { c, _ := echolimit.Context(r); return c.FormValue("username"), nil }
//
// It reports false for any other keyfunc.Request.
func Context(r keyfunc.Request) (echo.Context, bool) { return middleware.As(r, (*request).ec) }

// FrameworkIP returns a key function that keys a request by Echo's
// c.RealIP(), for apps whose Echo already knows its proxies. IPv6 clients
// are grouped by /64 and IPv4-mapped addresses folded, as keyfunc.IP does;
// a value that is not an IP address falls back to the transport peer.
// Every sluice adapter for a framework with its own idea of the client
// address has a FrameworkIP.
//
// WARNING: unless e.IPExtractor is set, c.RealIP() takes Echo's legacy path:
// the leftmost X-Forwarded-For entry, else X-Real-IP, else the peer. Any
// client can send those headers and get a fresh bucket per request. Use it
// only with e.IPExtractor = echo.ExtractIPDirect() or
// echo.ExtractIPFromXFFHeader(...) with trust options that name your proxies
// (its defaults trust loopback, link-local and all private networks).
// Otherwise prefer keyfunc.IP(), which reads the transport peer and walks
// forwarding headers only from proxies you trust.
func FrameworkIP() keyfunc.Func {
	return middleware.KeyFunc("echolimit", "FrameworkIP", Context, func(r keyfunc.Request, c echo.Context) (string, error) {
		return middleware.FrameworkIP(r, c.RealIP())
	})
}

// KeyFunc returns a key function that keys a request by f of its
// echo.Context: a login limit keyed by the form's username is
//
//	echolimit.KeyFunc(func(c echo.Context) (string, error) { return c.FormValue("username"), nil })
//
// An empty key means the request has none (core.ErrNoKey). The Func works
// only on requests of this package's middleware.
func KeyFunc(f func(echo.Context) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("echolimit", "KeyFunc", Context, func(_ keyfunc.Request, c echo.Context) (string, error) { return f(c) })
}
