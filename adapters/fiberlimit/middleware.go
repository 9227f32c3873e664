package fiberlimit

import (
	"context"
	"errors"
	"log/slog"
	"unsafe"

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

type config struct {
	key     keyfunc.Func
	cost    func(*fiber.Ctx) int64
	skip    func(*fiber.Ctx) bool
	denied  fiber.Handler
	onError func(*fiber.Ctx, error) (bool, error)
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
func WithCost(f func(*fiber.Ctx) int64) Option { return func(c *config) { c.cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*fiber.Ctx) bool) Option { return func(c *config) { c.skip = f } }

// WithDeniedHandler answers denied requests instead of the default 429 with a
// problem+json body (DeniedHandler). The rate-limit headers are already set
// when it runs, and the Decision is in c.Locals.
func WithDeniedHandler(h fiber.Handler) Option { return func(c *config) { c.denied = h } }

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns proceed true to let it continue to the next handler uncounted, or
// false to end it, with rerr as the middleware's result (a *fiber.Error for
// Fiber's ErrorHandler, or nil when f wrote the response). Without it the
// request continues and the error is logged, at most once a second. Every
// sluice adapter has this option, with this shape.
func WithErrorHandler(f func(c *fiber.Ctx, err error) (proceed bool, rerr error)) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// LocalsKey is the c.Locals key under which the middleware stores the
// request's *core.Decision.
const LocalsKey = "sluice.decision"

// New returns Fiber middleware that limits requests with l. It panics if l
// is nil.
func New(l *core.Limiter, opts ...Option) fiber.Handler {
	if l == nil {
		panic("fiberlimit.New: nil limiter")
	}
	c := config{denied: DeniedHandler}
	for _, o := range opts {
		o(&c)
	}
	undecided, refunds := middleware.NewLogger(c.logger), middleware.NewLogger(c.logger)
	hf := middleware.Formatter(c.headers)
	return func(fc *fiber.Ctx) error {
		call := core.Call{Key: c.key}
		var err error
		if c.skip != nil {
			var skip bool
			if skip, err = middleware.Skip(c.skip, fc); skip {
				return fc.Next()
			}
		}
		if c.cost != nil && err == nil {
			call.Cost, err = middleware.Cost(c.cost, fc)
		}
		r := (*request)(fc)
		// The pooled *fasthttp.RequestCtx must not reach the store: a Redis
		// call can outlive the request after a timeout. UserContext cannot.
		ctx := fc.UserContext()
		d := new(core.Decision)
		if err == nil {
			// fasthttp does not recover handlers: a panicking key function
			// would take the process down.
			err = middleware.Decide(ctx, l, r, call, d)
		}
		if middleware.Gone(ctx, d, err) {
			// The request's context ended (the app ties it to the client or
			// a deadline) before it was counted: it does not run.
			return fiber.ErrServiceUnavailable
		}
		if err != nil {
			if c.onError != nil {
				proceed, rerr := c.onError(fc, err)
				if proceed {
					return fc.Next()
				}
				return rerr
			}
			undecided.Undecided(ctx, err)
			return fc.Next()
		}
		if !d.Limited() { // no policy applies to this request
			return fc.Next()
		}
		var buf [128]byte
		f, _ := hf.Append(buf[:0], d, hf.Now())
		h := &fc.Response().Header
		for i := range f.N {
			// As fc.Set, less its scan of the value for line breaks: a
			// formatted value has none. fasthttp copies name and value, so
			// buf may be on the stack and the value read in place.
			h.SetBytesV(fieldfmt.Names[f.ID[i]], unsafe.Slice(unsafe.StringData(f.Value[i]), len(f.Value[i])))
		}
		// d holds no request memory (policy names are the Limiter's), so a
		// handler may keep the pointer after the request.
		fc.Locals(LocalsKey, d)
		if !d.Allowed {
			return c.denied(fc)
		}
		if !d.Refundable() {
			return fc.Next()
		}
		err = fc.Next()
		status := fc.Response().StatusCode()
		var fe *fiber.Error
		if errors.As(err, &fe) {
			status = fe.Code // the app's error handler has not written it yet
		} else if err != nil {
			status = fiber.StatusInternalServerError
		}
		if rerr := l.Refund(context.WithoutCancel(ctx), d, status); rerr != nil {
			refunds.RefundFailed(ctx, rerr)
		}
		return err
	}
}

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with an RFC 9457 problem+json body (ratelimitfields.Problem). Call it
// from a custom denied handler to keep the standard body.
func DeniedHandler(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, ratelimitfields.ProblemContentType)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Status(fiber.StatusTooManyRequests)
	if d, ok := DecisionFrom(c); ok {
		return c.Send(ratelimitfields.Problem(d)) // a fresh slice: Send keeps it
	}
	return c.SendString(`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}` + "\n")
}

// DecisionFrom returns the Decision the middleware made for this request.
// The Decision does not alias request memory: it may be kept after the
// request.
func DecisionFrom(c *fiber.Ctx) (*core.Decision, bool) {
	d, ok := c.Locals(LocalsKey).(*core.Decision)
	return d, ok
}
