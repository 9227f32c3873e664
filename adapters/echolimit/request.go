package echolimit

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/adapters/internal/httpfields"
	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

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
func (r *request) Route() string {
	if p := r.c.Path(); p != "" {
		return p
	}
	return r.c.Request().URL.Path
}

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

// Context returns the echo.Context of a request the middleware (or
// Request) viewed, for a key function that needs more than the view: a
// login limit keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { c, _ := echolimit.Context(r); return c.FormValue("username"), nil }
//
// It reports false for any other keyfunc.Request.
func Context(r keyfunc.Request) (echo.Context, bool) {
	v, ok := r.(*request)
	if !ok {
		return nil, false
	}
	return v.c, true
}

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
