package httplimit

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

type config struct {
	key     keyfunc.Func
	cost    func(*http.Request) int64
	skip    func(*http.Request) bool
	denied  http.Handler
	onError func(http.ResponseWriter, *http.Request, error) bool
	headers ratelimitfields.Config
	logger  *slog.Logger
}

// Option configures the middleware. The same options, with the framework's
// own types, exist in every adapter.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one route, the client IP on another).
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(*http.Request) int64) Option { return func(c *config) { c.cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*http.Request) bool) Option { return func(c *config) { c.skip = f } }

// WithDeniedHandler answers denied requests instead of the default 429 with a
// problem+json body. The rate-limit headers are already set when it runs, and
// the Decision is in the request context.
func WithDeniedHandler(h http.Handler) Option { return func(c *config) { c.denied = h } }

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked, every
// identity missing when a policy requires one): f returns true to let it
// continue to the next handler uncounted, or false when it has answered the
// request itself (for example 503). Without it the request continues and the
// error is logged, at most once a second (WithLogger). The error text must
// not reach the client. Every sluice adapter has this option, with this
// shape: the framework's request, the error, and whether to continue.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error) (proceed bool)) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the header families and the reset format (default:
// every family, X-RateLimit-Reset in epoch seconds).
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()). Each kind of line is written at most once a
// second, with the number of lines dropped since the last one.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New returns middleware that limits requests with l. It panics if l is nil.
func New(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("httplimit.New: nil limiter")
	}
	c := config{denied: http.HandlerFunc(DeniedHandler)}
	for _, o := range opts {
		o(&c)
	}
	undecided, refunds := middleware.NewLogger(c.logger), middleware.NewLogger(c.logger)
	f := middleware.Formatter(c.headers)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			call := core.Call{Key: c.key}
			var err error
			if c.skip != nil {
				var skip bool
				if skip, err = middleware.Skip(c.skip, r); skip {
					next.ServeHTTP(w, r)
					return
				}
			}
			if c.cost != nil && err == nil {
				call.Cost, err = middleware.Cost(c.cost, r)
			}
			s := new(httpfields.Scratch) // the one allocation: Decision, context, request, header values
			d := &s.Decision
			if err == nil {
				err = middleware.Decide(r.Context(), l, request{r}, call, d)
			}
			if middleware.Gone(r.Context(), d, err) {
				// The client left (or the request's deadline passed) before
				// it was counted: it does not run.
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			if err != nil {
				if c.onError != nil {
					if c.onError(w, r, err) {
						next.ServeHTTP(w, r)
					}
					return
				}
				undecided.Undecided(r.Context(), err)
				next.ServeHTTP(w, r)
				return
			}
			if !d.Limited() { // no policy applies to this request
				next.ServeHTTP(w, r)
				return
			}
			s.SetHeaders(f, w.Header(), f.Now())
			r = s.Request(r)
			if !d.Allowed {
				c.denied.ServeHTTP(w, r)
				return
			}
			if !d.Refundable() {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			if err := l.Refund(context.WithoutCancel(r.Context()), d, sw.status); err != nil {
				refunds.RefundFailed(r.Context(), err)
			}
		})
	}
}

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
	body := []byte(`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}` + "\n")
	if d, ok := DecisionFrom(r.Context()); ok {
		body = ratelimitfields.Problem(d)
	}
	w.Header().Set("Content-Type", ratelimitfields.ProblemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}

// NewContext returns a copy of ctx carrying d, where DecisionFrom finds it.
// The other adapters use it, so that net/http code under them sees the
// Decision too.
func NewContext(ctx context.Context, d *core.Decision) context.Context {
	return httpfields.NewContext(ctx, d)
}

// DecisionFrom returns the Decision the middleware made for this request.
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
func (v request) Route() string {
	if v.r.Pattern != "" {
		return v.r.Pattern
	}
	return v.r.URL.Path
}

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
