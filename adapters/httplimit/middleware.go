package httplimit

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

type config = middleware.Config[hctx, *call]

// Option configures the middleware. Every sluice adapter has the same
// options, with its framework's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one route, the client IP on another).
// HTTPRequest(r) gives f the *http.Request.
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.Key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(*http.Request) int64) Option {
	return func(c *config) { c.Cost = func(x hctx) int64 { return f(x.r) } }
}

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*http.Request) bool) Option {
	return func(c *config) { c.Skip = func(x hctx) bool { return f(x.r) } }
}

// WithDeniedHandler answers denied requests instead of the default 429 with a
// problem+json body. The rate-limit headers are already set when it runs, and
// the Decision is in the request context (DecisionFrom).
func WithDeniedHandler(h http.Handler) Option {
	return func(c *config) { c.Denied = func(x hctx, r *call) error { h.ServeHTTP(x.w, r.r); return nil } }
}

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked, every
// identity missing when a policy requires one): f returns true to let it
// continue to the next handler uncounted, or false when it has answered the
// request itself (for example 503). Without it the request continues and the
// error is logged, at most once a second (WithLogger). The error text must
// not reach the client. Every sluice adapter has this option: the
// framework's request and the error in, whether to continue out (with the
// handler's error, in frameworks whose handlers return one).
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error) (proceed bool)) Option {
	return func(c *config) { c.OnError = func(x hctx, err error) (bool, error) { return f(x.w, x.r, err), nil } }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.Headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()). Each kind of line is written at most once a
// second, with the number of lines dropped since the last one.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// New returns middleware that limits requests with l. It panics if l is nil.
// Under another sluice middleware (a global one, with this one on a route),
// its Decision and headers are merged with the earlier one's: allowed only
// if both allowed, the most constraining policy of either binding (see
// docs/policies.md, "One Limiter with Match, or stacked middlewares").
func New(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	f := middleware.New("httplimit", l, flow{}, WithDeniedHandler(http.HandlerFunc(DeniedHandler)), opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _ = f.Run(hctx{w, r, next}) })
	}
}

// hctx is a request, its response and the rest of its chain.
type hctx struct {
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler
}

// call is the state of one request the middleware decides, in one
// allocation: its view, whose request is the one carrying the Decision
// once published, and the Scratch.
type call struct {
	request
	s httpfields.Scratch
}

func (r *call) Decision() *core.Decision { return &r.s.Decision }

// flow maps net/http onto the middleware flow.
type flow struct{}

func (flow) Start(x hctx) *call { return &call{request: request{x.r}} }

func (flow) Earlier(x hctx) *core.Decision { d, _ := DecisionFrom(x.r.Context()); return d }

func (flow) Publish(x hctx, r *call, d *core.Decision, f *fieldfmt.Formatter) {
	r.r = middleware.PublishHTTP(&r.s, f, x.w.Header(), x.r, d)
}

func (flow) Next(x hctx, r *call) error {
	if r != nil {
		x.r = r.r
	}
	x.next.ServeHTTP(x.w, x.r)
	return nil
}

func (flow) Watch(x hctx, r *call) (int, error) {
	sw := &statusWriter{ResponseWriter: x.w, status: http.StatusOK}
	x.next.ServeHTTP(sw, r.r)
	return sw.status, nil
}

func (flow) Abort(hctx) {}

func (flow) Unavailable(x hctx) error { x.w.WriteHeader(http.StatusServiceUnavailable); return nil }

// statusWriter remembers the status of a response, for refunds.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with an RFC 9457 problem+json body. Use it from a custom denied
// handler to keep the standard body.
func DeniedHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", ratelimitfields.ProblemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(middleware.ProblemFor(DecisionFrom(r.Context())))
}

// DecisionFrom returns the Decision the middleware made for this request:
// under stacked sluice middlewares, the merge of theirs (see New).
func DecisionFrom(ctx context.Context) (*core.Decision, bool) {
	return httpfields.DecisionFrom(ctx)
}

// request is the keyfunc.Request view of an *http.Request: one pointer, so
// it fits an interface without an allocation.
type request struct{ r *http.Request }

func (v request) Context() context.Context { return v.r.Context() }
func (v request) Method() string           { return v.r.Method }

// Route is the ServeMux pattern that matched ("GET /users/{id}"), or the path
// when the request was not routed by a Go 1.22+ ServeMux.
func (v request) Route() string { return middleware.Or(v.r.Pattern, v.r.URL.Path) }

// Path is the path as a Go 1.22+ ServeMux (or chi) matches it: each
// segment decoded, but an encoded slash ("%2F") kept inside its segment, so
// that "/files/a%2Fb" is the one segment the router saw and not two. It is
// r.URL.Path unless the request path has such escapes. Paths the ServeMux
// would not serve as they are ("//login", "/./login", "/login/..") are
// redirected by it to their clean form, which is then counted.
func (v request) Path() string { return middleware.RoutedPath(v.r.URL) }

func (v request) Header(name string) string         { return v.r.Header.Get(name) }
func (v request) HeaderValues(name string) []string { return v.r.Header.Values(name) }
func (v request) Query(name string) string {
	q, _ := url.ParseQuery(v.r.URL.RawQuery)
	return q.Get(name)
}
func (v request) RemoteAddr() string { return v.r.RemoteAddr }

// Request returns the keyfunc.Request view of r, for key functions used
// outside the middleware.
func Request(r *http.Request) keyfunc.Request { return request{r} }

// HTTPRequest returns the *http.Request of a request the middleware (or
// Request) viewed, for a key function that needs more than the view: a
// login limit keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { hr, _ := httplimit.HTTPRequest(r); return hr.PostFormValue("username"), nil }
//
// It reports false for any other keyfunc.Request.
func HTTPRequest(r keyfunc.Request) (*http.Request, bool) {
	switch v := r.(type) {
	case *call:
		return v.r, true
	case request:
		return v.r, true
	}
	return nil, false
}

// KeyFunc returns a key function that keys a request by f of its
// *http.Request: a login limit keyed by the form's username is
//
//	httplimit.KeyFunc(func(r *http.Request) (string, error) { return r.PostFormValue("username"), nil })
//
// An empty key means the request has none (core.ErrNoKey). The Func works
// only on requests of this package's middleware (and Request).
func KeyFunc(f func(*http.Request) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("httplimit", "KeyFunc", HTTPRequest, func(_ keyfunc.Request, r *http.Request) (string, error) { return f(r) })
}
