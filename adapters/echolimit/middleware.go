package echolimit

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// DecisionKey is the echo.Context key under which the middleware stores the
// *core.Decision (c.Get(DecisionKey)); DecisionFrom reads it.
const DecisionKey = "sluice.decision"

type config struct {
	key     keyfunc.Func
	cost    func(echo.Context) int64
	skip    func(echo.Context) bool
	denied  func(echo.Context, *core.Decision) error
	onError func(echo.Context, error) (bool, error)
	headers ratelimitfields.Config
	logger  *slog.Logger
}

// Option configures the middleware. The options are those of httplimit, with
// Echo's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one group, the client IP on another).
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(echo.Context) int64) Option { return func(c *config) { c.cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers. A middleware.Skipper fits.
func WithSkip(f func(echo.Context) bool) Option { return func(c *config) { c.skip = f } }

// WithDeniedHandler answers denied requests instead of DeniedHandler; the
// middleware returns what f returns, and the handler does not run. The
// rate-limit headers are already set when f runs.
func WithDeniedHandler(f func(echo.Context, *core.Decision) error) Option {
	return func(c *config) { c.denied = f }
}

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns proceed true to let it continue to the next handler uncounted, or
// false to end it, with rerr as the middleware's result (an *echo.HTTPError
// such as echo.ErrServiceUnavailable for Echo's error handler to write, or
// nil when f wrote the response). Without it the request continues and the
// error is logged, at most once a second. Every sluice adapter has this
// option, with this shape.
func WithErrorHandler(f func(c echo.Context, err error) (proceed bool, rerr error)) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New returns Echo middleware that limits requests with l. Register it with
// e.Use or on a group or route, not with e.Pre: route templates are known
// only after routing. New panics if l is nil.
func New(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	if l == nil {
		panic("echolimit.New: nil limiter")
	}
	c := config{denied: DeniedHandler}
	for _, o := range opts {
		o(&c)
	}
	undecided, refunds := middleware.NewLogger(c.logger), middleware.NewLogger(c.logger)
	f := middleware.Formatter(c.headers)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			call := core.Call{Key: c.key}
			var err error
			if c.skip != nil {
				var skip bool
				if skip, err = middleware.Skip(c.skip, ec); skip {
					return next(ec)
				}
			}
			if c.cost != nil && err == nil {
				call.Cost, err = middleware.Cost(c.cost, ec)
			}
			ctx := ec.Request().Context()
			// One allocation holds the view and the Scratch: the Decision,
			// its context, the request and the header values.
			v := &request{c: ec}
			d := &v.s.Decision
			if err == nil {
				err = middleware.Decide(ctx, l, v, call, d)
			}
			if middleware.Gone(ctx, d, err) {
				// The client left (or the request's deadline passed) before
				// it was counted: it does not run.
				return echo.ErrServiceUnavailable
			}
			if err != nil {
				if c.onError != nil {
					proceed, rerr := c.onError(ec, err)
					if proceed {
						return next(ec)
					}
					return rerr
				}
				undecided.Undecided(ctx, err)
				return next(ec)
			}
			if !d.Limited() { // no policy applies to this request
				return next(ec)
			}
			v.s.SetHeaders(f, ec.Response().Header(), f.Now())
			ec.Set(DecisionKey, d)
			ec.SetRequest(v.s.Request(ec.Request()))
			if !d.Allowed {
				return c.denied(ec, d)
			}
			if !d.Refundable() {
				return next(ec)
			}
			err = next(ec)
			status := ec.Response().Status
			if he, ok := err.(*echo.HTTPError); ok && !ec.Response().Committed {
				status = he.Code // the error handler has not written it yet
			} else if err != nil && !ec.Response().Committed {
				status = http.StatusInternalServerError
			}
			if rerr := l.Refund(context.WithoutCancel(ctx), d, status); rerr != nil {
				refunds.RefundFailed(ctx, rerr)
			}
			return err
		}
	}
}

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
func DeniedHandler(c echo.Context, d *core.Decision) error {
	p := &problem{body: ratelimitfields.Problem(d)}
	res := c.Response()
	head := c.Request().Method == http.MethodHead
	res.Before(func() {
		if res.Status != http.StatusTooManyRequests {
			return
		}
		h := res.Header()
		if h.Get("Cache-Control") == "" {
			h.Set("Cache-Control", "no-store")
		}
		if (p.marshaled || head) && fromDefaultHandler() {
			h.Set(echo.HeaderContentType, ratelimitfields.ProblemContentType)
		}
	})
	return &echo.HTTPError{Code: http.StatusTooManyRequests, Message: p}
}

// fromDefaultHandler reports whether Echo's DefaultHTTPErrorHandler is
// writing the response: it writes the problem document itself as the body
// (or no body, for HEAD), where a custom handler may write anything.
func fromDefaultHandler() bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "/echo/v4.(*Echo).DefaultHTTPErrorHandler") {
			return true
		}
		if !more {
			return false
		}
	}
}

// problem is the Message of the error DeniedHandler returns. It records that
// it was marshaled, so that only a response carrying it is relabelled.
type problem struct {
	body      []byte
	marshaled bool
}

func (p *problem) MarshalJSON() ([]byte, error) { p.marshaled = true; return p.body, nil }
func (p *problem) String() string               { return http.StatusText(http.StatusTooManyRequests) }

// DecisionFrom returns the Decision the middleware made for this request.
func DecisionFrom(c echo.Context) (*core.Decision, bool) {
	d, ok := c.Get(DecisionKey).(*core.Decision)
	return d, ok
}
