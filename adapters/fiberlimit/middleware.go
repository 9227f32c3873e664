package fiberlimit

import (
	"errors"
	"log/slog"
	"unsafe"

	"github.com/gofiber/fiber/v2"

	"github.com/sluicehq/sluice/adapters/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

type config struct {
	key     keyfunc.Func
	cost    func(*fiber.Ctx) int64
	skip    func(*fiber.Ctx) bool
	denied  fiber.Handler
	onError func(*fiber.Ctx, error) error
	headers httplimit.HeaderConfig
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

// WithErrorHandler answers requests the limiter could not decide (no
// identity, store failure) instead of letting them through. Its error, if
// any, goes to Fiber's ErrorHandler.
func WithErrorHandler(f func(*fiber.Ctx, error) error) Option {
	return func(c *config) { c.onError = f }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h httplimit.HeaderConfig) Option { return func(c *config) { c.headers = h } }

// WithLogger sets where undecided requests are logged when no error handler
// is set (default slog.Default()).
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
	if c.logger == nil {
		c.logger = slog.Default()
	}
	hf := httplimit.NewFormatter(c.headers)
	return func(fc *fiber.Ctx) error {
		if c.skip != nil && c.skip(fc) {
			return fc.Next()
		}
		call := core.Call{Key: c.key}
		if c.cost != nil {
			call.Cost = c.cost(fc)
		}
		r := (*request)(fc)
		// The pooled *fasthttp.RequestCtx must not reach the store: a Redis
		// call can outlive the request after a timeout. UserContext cannot.
		ctx := fc.UserContext()
		d := new(core.Decision)
		if err := l.Decide(ctx, r, call, d); err != nil {
			if c.onError != nil {
				return c.onError(fc, err)
			}
			c.logger.LogAttrs(ctx, slog.LevelWarn, "sluice: request not rate limited", slog.String("error", err.Error()))
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
			h.SetBytesV(f.Name[i], unsafe.Slice(unsafe.StringData(f.Value[i]), len(f.Value[i])))
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
		err := fc.Next()
		status := fc.Response().StatusCode()
		var fe *fiber.Error
		if errors.As(err, &fe) {
			status = fe.Code // the app's error handler has not written it yet
		} else if err != nil {
			status = fiber.StatusInternalServerError
		}
		if rerr := l.Refund(ctx, d, status); rerr != nil {
			c.logger.LogAttrs(ctx, slog.LevelWarn, "sluice: refund failed", slog.String("error", rerr.Error()))
		}
		return err
	}
}

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with an RFC 9457 problem+json body (httplimit.Problem). Call it
// from a custom denied handler to keep the standard body.
func DeniedHandler(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, httplimit.ProblemContentType)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Status(fiber.StatusTooManyRequests)
	if d, ok := DecisionFrom(c); ok {
		return c.Send(httplimit.Problem(d)) // a fresh slice: Send keeps it
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
