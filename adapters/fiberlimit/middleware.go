package fiberlimit

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/ratelimitfields"
)

type config = middleware.Config[*fiber.Ctx, *call]

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
	return func(c *config) { c.Denied = func(fc *fiber.Ctx, _ *call) error { return h(fc) } }
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
// request's *core.Decision; DecisionFrom reads it (and says for how long
// it is valid).
const DecisionKey = "sluice.decision"

// New returns Fiber middleware that limits requests with l. It panics if l
// is nil. Stacked on a route under another sluice middleware (a global one),
// its Decision and headers are merged with the earlier one's: allowed only
// if both allowed, the most constraining policy of either binding (see
// docs/policies.md, "One Limiter with Match, or stacked middlewares").
func New(l *core.Limiter, opts ...Option) fiber.Handler {
	calls := &sync.Pool{}
	calls.New = func() any { return &call{calls: calls} }
	return middleware.New("fiberlimit", l, flow{calls}, WithDeniedHandler(DeniedHandler), opts).Run
}

// flow maps Fiber onto the middleware flow.
type flow struct {
	calls *sync.Pool // of *call, the state of a request this middleware decides
}

// Start takes a call from the pool and puts it in c.Locals (under the
// pool's pointer: a key of this middleware's own), which Fiber empties
// after the top handler returns, closing every io.Closer: the call's Close
// then gives it back, once the response and the app's error handler are
// done with its Decision.
func (f flow) Start(fc *fiber.Ctx) *call {
	r := f.calls.Get().(*call)
	r.request = (*request)(fc)
	fc.Locals(f.calls, r)
	return r
}

func (flow) Earlier(fc *fiber.Ctx) *core.Decision { d, _ := DecisionFrom(fc); return d }

// Publish writes d's fields with fasthttp, which copies names and values:
// buf may be on the stack, and the values are read in place (as fc.Set,
// less its scan of the value for line breaks: a formatted value has none).
// The names are written as fasthttp would write them (SetCanonical: not
// copied and normalized again).
func (flow) Publish(fc *fiber.Ctx, _ *call, d *core.Decision, f *fieldfmt.Formatter) {
	buf, fb := [128]byte{}, fieldfmt.Builder{}
	out := f.Build(&fb, buf[:0], d, f.Now(d))
	names := middleware.Names(fc.App().Config().DisableHeaderNormalizing)
	for i := range fb.Len() {
		fc.Response().Header.SetCanonical(middleware.Bytes(names[fb.ID(i)]), fb.ValueBytes(i, out))
	}
	fc.Locals(DecisionKey, d)
}

func (flow) Next(fc *fiber.Ctx, _ *call) error { return fc.Next() }

func (flow) Watch(fc *fiber.Ctx, _ *call) (int, error) {
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
// under stacked sluice middlewares, the merge of theirs (see New).
// Like the values of a *fiber.Ctx, it is valid only within the request:
// the handlers, the denied handler and the app's ErrorHandler may read it,
// but it goes back to the middleware's pool for another request once
// Fiber empties c.Locals, after the top handler returns. Do not keep the
// pointer, or its Results, beyond that: copy what you need (a
// core.PolicyResult is a plain value, and its strings are the Limiter's).
func DecisionFrom(c *fiber.Ctx) (*core.Decision, bool) {
	return middleware.DecisionOf(c.Locals(DecisionKey))
}

// request is the keyfunc.Request view of a *fiber.Ctx: one pointer, so it
// fits an interface without an allocation. Its strings alias fasthttp's
// buffers, valid until the handler returns (see the package documentation).
type request fiber.Ctx

func (r *request) ctx() *fiber.Ctx { return (*fiber.Ctx)(r) }

// Context is c.UserContext(): never the pooled *fasthttp.RequestCtx.
func (r *request) Context() context.Context { return r.ctx().UserContext() }
func (r *request) Method() string           { return r.ctx().Method() }

// Route is the template of the route the middleware runs on ("/users/:id");
// under app.Use, the Use prefix.
func (r *request) Route() string { return r.ctx().Route().Path }

// Path is the path as Fiber's router matches it: c.Path() (decoded when
// Config.UnescapePath is set), in lower case unless Config.CaseSensitive,
// without trailing slashes unless Config.StrictRouting. Fiber routes
// "/LOGIN" and "/login/" to "/login" by default, so a route policy must see
// "/login" for both; write Match.Routes in lower case for such an app.
func (r *request) Path() string {
	cfg := r.ctx().App().Config()
	return middleware.FoldPath(r.ctx().Path(), !cfg.StrictRouting, !cfg.CaseSensitive)
}

func (r *request) Header(name string) string {
	h := &r.ctx().Request().Header
	return middleware.Header(h.Peek(name), r.ctx().App().Config().DisableHeaderNormalizing, h.VisitAll, name)
}

func (r *request) HeaderValues(name string) []string {
	h := &r.ctx().Request().Header
	return middleware.HeaderValues(h.PeekAll(name), r.ctx().App().Config().DisableHeaderNormalizing, h.VisitAll, name)
}

func (r *request) Query(name string) string {
	return utils.UnsafeString(r.ctx().Context().QueryArgs().Peek(name))
}

// RemoteAddr is the transport peer, in a new string. A TCP address, the
// common case, is formatted with one allocation instead of the three of
// net.TCPAddr.String, and reads the same.
func (r *request) RemoteAddr() string { return middleware.AddrString(r.ctx().Context().RemoteAddr()) }

// PeerAddr is RemoteAddr's address, not formatted (keyfunc.PeerRequest).
func (r *request) PeerAddr() (netip.Addr, bool) { return middleware.PeerAddr(r.ctx().Context()) }

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware. Its strings are valid only until the handler
// returns.
func Request(c *fiber.Ctx) keyfunc.Request { return (*request)(c) }

// Context returns the *fiber.Ctx of a request the middleware (or Request)
// viewed, for a key function that needs more than the view: a login limit
// keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { c, _ := fiberlimit.Context(r); return c.FormValue("username"), nil }
//
// Like the view's strings, c's values alias fasthttp's buffers until the
// handler returns (core copies the identity into the store key). It reports
// false for any other keyfunc.Request.
func Context(r keyfunc.Request) (*fiber.Ctx, bool) {
	switch v := r.(type) {
	case *call:
		return v.ctx(), v.request != nil
	case *request:
		return v.ctx(), true
	}
	return nil, false
}

// call is the state of one request the middleware decides: the view and
// its Decision, from the middleware's pool, so that an allowed request
// takes no allocation of its own. It is given back by Close, when Fiber
// empties the request's Locals.
type call struct {
	*request
	d     core.Decision
	calls *sync.Pool
	peer  [48]byte // PeerText's text
	peerN uint8    // its length, 0 until formatted
}

func (r *call) Decision() *core.Decision { return &r.d }

// PeerText is PeerAddr's address as text, formatted once into r
// (keyfunc.PeerTextRequest): keyfunc.IP keys an IPv4 peer with it, without
// an allocation. It is valid until the request ends, as the Decision.
func (r *call) PeerText() (string, bool) {
	if r.peerN == 0 {
		a, ok := r.PeerAddr()
		if !ok {
			return "", false
		}
		r.peerN = uint8(len(a.AppendTo(r.peer[:0])))
	}
	return unsafe.String(&r.peer[0], r.peerN), true
}

// Close gives r back to its pool, with nothing of the request left in it.
// Fiber calls it once the top handler has returned (Ctx.Locals); a second
// call does nothing.
func (r *call) Close() error {
	if r.request == nil {
		return nil
	}
	*r = call{calls: r.calls}
	r.calls.Put(r)
	return nil
}

// FrameworkIP returns a key function that keys a request by Fiber's c.IP(),
// grouped as keyfunc.IP groups the peer (IPv6 by /64, IPv4-mapped
// addresses folded); a value that is not an IP address (an empty one, or a
// raw header list) falls back to the transport peer. Every sluice adapter
// for a framework with its own idea of the client address has a
// FrameworkIP.
//
// WARNING: c.IP() is spoofable with Fiber's defaults. When Config.ProxyHeader
// is set and Config.EnableTrustedProxyCheck is false (its default), c.IP()
// returns that header for every request, from whoever sent it. With
// ProxyHeader "X-Forwarded-For" it is the raw header value, or with
// EnableIPValidation its leftmost valid address: the entry the client wrote
// itself. A client can then choose a fresh bucket for every request and is
// never limited. Use FrameworkIP only with EnableTrustedProxyCheck and
// TrustedProxies listing your proxies, and a ProxyHeader that they overwrite
// (X-Real-IP). Otherwise use keyfunc.IP, which reads the transport peer and
// walks forwarding headers from the right through proxies you declare.
//
// The Func works only on requests of this package's middleware.
func FrameworkIP() keyfunc.Func {
	return middleware.KeyFunc("fiberlimit", "FrameworkIP", Context, func(r keyfunc.Request, c *fiber.Ctx) (string, error) {
		return middleware.FrameworkIP(r, c.IP())
	})
}

// KeyFunc returns a key function that keys a request by f of its
// *fiber.Ctx: a login limit keyed by the form's username is
//
//	fiberlimit.KeyFunc(func(c *fiber.Ctx) (string, error) { return c.FormValue("username"), nil })
//
// The key may alias fasthttp's buffers (core copies it into the store
// key); an empty key means the request has none (core.ErrNoKey). The Func
// works only on requests of this package's middleware.
func KeyFunc(f func(*fiber.Ctx) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("fiberlimit", "KeyFunc", Context, func(_ keyfunc.Request, c *fiber.Ctx) (string, error) { return f(c) })
}
