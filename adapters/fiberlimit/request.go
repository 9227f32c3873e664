package fiberlimit

import (
	"context"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

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
	c := r.ctx()
	if v := c.Request().Header.Peek(name); v != nil {
		return utils.UnsafeString(v)
	}
	if v := r.scan(name, 1); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *request) HeaderValues(name string) []string {
	c := r.ctx()
	lines := c.Request().Header.PeekAll(name) // fasthttp's scratch slice: convert now
	if len(lines) == 0 {
		return r.scan(name, -1)
	}
	vals := make([]string, len(lines))
	for i, v := range lines {
		vals[i] = utils.UnsafeString(v)
	}
	return vals
}

// scan finds up to n (all if n < 0) lines of the header name ignoring case,
// for apps with DisableHeaderNormalizing, where fasthttp's lookups are exact.
func (r *request) scan(name string, n int) []string {
	c := r.ctx()
	if !c.App().Config().DisableHeaderNormalizing {
		return nil
	}
	var vals []string
	c.Request().Header.VisitAll(func(k, v []byte) {
		if len(vals) != n && strings.EqualFold(utils.UnsafeString(k), name) {
			vals = append(vals, utils.UnsafeString(v))
		}
	})
	return vals
}

func (r *request) Query(name string) string {
	return utils.UnsafeString(r.ctx().Context().QueryArgs().Peek(name))
}

// RemoteAddr is the transport peer, in a new string. A TCP address, the
// common case, is formatted with one allocation instead of the three of
// net.TCPAddr.String, and reads the same.
func (r *request) RemoteAddr() string { return middleware.AddrString(r.ctx().Context().RemoteAddr()) }

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
	v, ok := r.(*request)
	if !ok {
		return nil, false
	}
	return v.ctx(), true
}

// Decision allocates the Decision of a request the middleware decides:
// the view itself is the *fiber.Ctx, so that is the request's one
// allocation.
func (r *request) Decision() *core.Decision { return new(core.Decision) }

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
