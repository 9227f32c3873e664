package ginlimit

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// DecisionKey is the gin.Context key under which the middleware stores the
// *core.Decision (c.Get(DecisionKey)); DecisionFrom reads it.
const DecisionKey = "sluice.decision"

type config struct {
	key     keyfunc.Func
	cost    func(*gin.Context) int64
	skip    func(*gin.Context) bool
	denied  gin.HandlerFunc
	onError func(*gin.Context, error) bool
	headers ratelimitfields.Config
	logger  *slog.Logger
}

// Option configures the middleware. The options are those of httplimit, with
// gin's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one route group, the client IP on
// another).
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(*gin.Context) int64) Option { return func(c *config) { c.cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*gin.Context) bool) Option { return func(c *config) { c.skip = f } }

// WithDeniedHandler answers denied requests instead of DeniedHandler. The
// rate-limit headers are already set and the Decision is stored when h runs;
// the chain is aborted after it (h may call c.Next to let the request
// through anyway, as a shadow mode would).
func WithDeniedHandler(h gin.HandlerFunc) Option { return func(c *config) { c.denied = h } }

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns true to let it continue to the next handler uncounted, or false
// when it has answered the request itself (the chain is then aborted).
// Without it the request continues and the error is logged, at most once a
// second. Every sluice adapter has this option, with this shape.
func WithErrorHandler(f func(c *gin.Context, err error) (proceed bool)) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New returns gin middleware that limits requests with l. It panics if l is
// nil.
func New(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	if l == nil {
		panic("ginlimit.New: nil limiter")
	}
	c := config{denied: DeniedHandler}
	for _, o := range opts {
		o(&c)
	}
	undecided, refunds := middleware.NewLogger(c.logger), middleware.NewLogger(c.logger)
	f := middleware.Formatter(c.headers)
	return func(gc *gin.Context) {
		call := core.Call{Key: c.key}
		var err error
		if c.skip != nil {
			var skip bool
			if skip, err = middleware.Skip(c.skip, gc); skip {
				gc.Next()
				return
			}
		}
		if c.cost != nil && err == nil {
			call.Cost, err = middleware.Cost(c.cost, gc)
		}
		ctx := gc.Request.Context()
		s := new(httpfields.Scratch) // the one allocation: Decision, context, request, header values
		d := &s.Decision
		if err == nil {
			err = middleware.Decide(ctx, l, (*request)(gc), call, d)
		}
		if middleware.Gone(ctx, d, err) {
			// The client left (or the request's deadline passed) before it
			// was counted: it does not run.
			gc.AbortWithStatus(http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			if c.onError != nil {
				if c.onError(gc, err) {
					gc.Next()
				} else {
					gc.Abort()
				}
				return
			}
			undecided.Undecided(ctx, err)
			gc.Next()
			return
		}
		if !d.Limited() { // no policy applies to this request
			gc.Next()
			return
		}
		s.SetHeaders(f, gc.Writer.Header(), f.Now())
		gc.Set(DecisionKey, d)
		gc.Request = s.Request(gc.Request)
		if !d.Allowed {
			c.denied(gc)
			gc.Abort()
			return
		}
		gc.Next()
		if d.Refundable() { // policies that do not count failed (or successful) responses
			if err := l.Refund(context.WithoutCancel(ctx), d, gc.Writer.Status()); err != nil {
				refunds.RefundFailed(ctx, err)
			}
		}
	}
}

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with the RFC 9457 problem+json body of ratelimitfields.Problem, and the
// chain aborted. Call it from a custom denied handler to keep the standard
// body.
func DeniedHandler(c *gin.Context) {
	body := []byte(`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}` + "\n")
	if d, ok := DecisionFrom(c); ok {
		body = ratelimitfields.Problem(d)
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusTooManyRequests, ratelimitfields.ProblemContentType, body)
	c.Abort()
}

// DecisionFrom returns the Decision the middleware made for this request.
func DecisionFrom(c *gin.Context) (*core.Decision, bool) {
	v, _ := c.Get(DecisionKey)
	d, ok := v.(*core.Decision)
	return d, ok
}
