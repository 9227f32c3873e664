package fiberlimit

import (
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

type config = middleware.Config[*fiber.Ctx, *request]

// Option configures the middleware. Every sluice adapter has the same
// options, with its framework's types.
type Option func(*config)

// WithKey counts requests under f's identity instead of each policy's Key
// (per-route identities: an API key on one route, the client IP on another).
// Context(r) gives f the *fiber.Ctx.
func WithKey(f keyfunc.Func) Option { return func(c *config) { c.Key = f } }

// WithCost sets the cost of a request (default 1; 0 also means 1).
func WithCost(f func(*fiber.Ctx) int64) Option { return func(c *config) { c.Cost = f } }

// WithSkip exempts requests for which f returns true: they are neither
// counted nor given headers.
func WithSkip(f func(*fiber.Ctx) bool) Option { return func(c *config) { c.Skip = f } }

// WithDeniedHandler answers denied requests instead of the default 429 with a
// problem+json body (DeniedHandler); the middleware returns what h returns.
// The rate-limit headers are already set and the Decision stored
// (DecisionFrom) when h runs.
func WithDeniedHandler(h fiber.Handler) Option {
	return func(c *config) { c.Denied = func(r *request) error { return h(r.ctx()) } }
}

// WithErrorHandler decides what a request the limiter could not decide
// gets (a store failure, a key function or callback that panicked): f
// returns proceed true to let it continue to the next handler uncounted, or
// false to end it, with rerr as the middleware's result (a *fiber.Error for
// Fiber's ErrorHandler, or nil when f wrote the response). Without it the
// request continues and the error is logged, at most once a second. Every
// sluice adapter has this option: the framework's request and the error in,
// whether to continue out (with the handler's error, in frameworks whose
// handlers return one).
func WithErrorHandler(f func(c *fiber.Ctx, err error) (proceed bool, rerr error)) Option {
	return func(c *config) { c.OnError = f }
}

// WithHeaders chooses the header families and the reset format.
func WithHeaders(h ratelimitfields.Config) Option { return func(c *config) { c.Headers = h } }

// WithLogger sets where undecided requests and failed refunds are logged
// (default slog.Default()), each kind at most once a second.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// DecisionKey is the c.Locals key under which the middleware stores the
// request's *core.Decision; DecisionFrom reads it.
const DecisionKey = "sluice.decision"

// New returns Fiber middleware that limits requests with l. It panics if l
// is nil. Stacked on a route under another sluice middleware (a global
// one), its Decision and headers are merged with the earlier one's
// (core.Merge).
func New(l *core.Limiter, opts ...Option) fiber.Handler {
	return middleware.New("fiberlimit", l, flow{}, WithDeniedHandler(DeniedHandler), opts).Run
}

// flow maps Fiber onto the middleware flow.
type flow struct{}

func (flow) Start(fc *fiber.Ctx) *request { return (*request)(fc) }

func (flow) Earlier(fc *fiber.Ctx) *core.Decision { d, _ := DecisionFrom(fc); return d }

// Publish writes d's fields with fasthttp, which copies names and values:
// buf may be on the stack, and the values are read in place (as fc.Set,
// less its scan of the value for line breaks: a formatted value has none).
// d holds no request memory (policy names are the Limiter's), so a handler
// may keep the pointer after the request.
func (flow) Publish(fc *fiber.Ctx, _ *request, d *core.Decision, f *fieldfmt.Formatter) {
	var buf [128]byte
	fields, _ := f.Append(buf[:0], d, f.Now())
	h := &fc.Response().Header
	for i := range fields.N {
		h.SetBytesV(fieldfmt.Names[fields.ID[i]], unsafe.Slice(unsafe.StringData(fields.Value[i]), len(fields.Value[i])))
	}
	fc.Locals(DecisionKey, d)
}

func (flow) Next(fc *fiber.Ctx, _ *request) error { return fc.Next() }

func (flow) Watch(fc *fiber.Ctx, _ *request) (int, error) {
	err := fc.Next()
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code, err // the app's error handler has not written it yet
	} else if err != nil {
		return fiber.StatusInternalServerError, err
	}
	return fc.Response().StatusCode(), nil
}

func (flow) Abort(*fiber.Ctx) {}

func (flow) Unavailable(*fiber.Ctx) error { return fiber.ErrServiceUnavailable }

// DeniedHandler is the default answer to a denied request: 429 Too Many
// Requests with an RFC 9457 problem+json body (ratelimitfields.Problem). Call it
// from a custom denied handler to keep the standard body.
func DeniedHandler(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, ratelimitfields.ProblemContentType)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(fiber.StatusTooManyRequests).Send(middleware.ProblemFor(DecisionFrom(c))) // a fresh slice: Send keeps it
}

// DecisionFrom returns the Decision the middleware made for this request:
// under stacked sluice middlewares, the merge of theirs (core.Merge).
// The Decision does not alias request memory: it may be kept after the
// request.
func DecisionFrom(c *fiber.Ctx) (*core.Decision, bool) {
	d, ok := c.Locals(DecisionKey).(*core.Decision)
	return d, ok
}
