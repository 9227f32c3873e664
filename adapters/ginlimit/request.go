package ginlimit

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/adapters/internal/middleware"
	"github.com/sluicehq/sluice/keyfunc"
)

// request is the keyfunc.Request view of a *gin.Context: a pointer, so it
// fits an interface without an allocation.
type request gin.Context

func (r *request) Context() context.Context { return r.Request.Context() }
func (r *request) Method() string           { return r.Request.Method }

// Route is the route template that matched ("/users/:id"), or the path when
// no route did (404s, which run the engine's global middleware).
func (r *request) Route() string {
	if p := (*gin.Context)(r).FullPath(); p != "" {
		return p
	}
	return r.Request.URL.Path
}

// Path is the path as gin's router matched it. When a route matched (global
// middleware runs after routing), it is the request path if that is one the
// route template matches, else the path as gin cleans it (RemoveExtraSlash),
// else the template itself: a variant of a path that reached a route's
// handlers is counted as that route. When no route matched, it is the
// cleaned path.
func (r *request) Path() string {
	p := middleware.RoutedPath(r.Request.URL)
	return middleware.TemplatePath((*gin.Context)(r).FullPath(), p, middleware.CleanPath(p), middleware.CleanPath(r.Request.URL.Path))
}

func (r *request) Header(name string) string         { return r.Request.Header.Get(name) }
func (r *request) HeaderValues(name string) []string { return r.Request.Header.Values(name) }
func (r *request) Query(name string) string          { return (*gin.Context)(r).Query(name) }
func (r *request) RemoteAddr() string                { return r.Request.RemoteAddr }

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware.
func Request(c *gin.Context) keyfunc.Request { return (*request)(c) }

// Context returns the *gin.Context of a request the middleware (or
// Request) viewed, for a key function that needs more than the view: a
// login limit keyed by the form's username is
//
//	func(r keyfunc.Request) (string, error) { c, _ := ginlimit.Context(r); return c.PostForm("username"), nil }
//
// It reports false for any other keyfunc.Request.
func Context(r keyfunc.Request) (*gin.Context, bool) {
	switch v := r.(type) {
	case *call:
		return v.gc(), true
	case *request:
		return (*gin.Context)(v), true
	}
	return nil, false
}

// FrameworkIP returns a key function that keys a request by gin's
// c.ClientIP(), for apps whose engine already knows its proxies. IPv6
// clients are grouped by /64 and IPv4-mapped addresses folded, as
// keyfunc.IP does; a value that is not an IP address falls back to the
// transport peer. Every sluice adapter for a framework with its own idea of
// the client address has a FrameworkIP.
//
// WARNING: with gin's defaults the client chooses this key. A gin.Engine
// trusts every proxy (0.0.0.0/0 and ::/0) and ForwardedByClientIP is on, so
// c.ClientIP() is the leftmost X-Forwarded-For entry, which any client can
// write, getting a fresh bucket per request. Use it only after
// engine.SetTrustedProxies names your proxies (or nil to ignore headers), or
// with engine.TrustedPlatform set to a header your edge overwrites. Without
// proxies, prefer keyfunc.IP(), which reads the transport peer and walks
// forwarding headers only from proxies you trust.
func FrameworkIP() keyfunc.Func {
	return middleware.KeyFunc("ginlimit", "FrameworkIP", Context, func(r keyfunc.Request, c *gin.Context) (string, error) {
		return middleware.FrameworkIP(r, c.ClientIP())
	})
}

// KeyFunc returns a key function that keys a request by f of its
// *gin.Context: a login limit keyed by the form's username is
//
//	ginlimit.KeyFunc(func(c *gin.Context) (string, error) { return c.PostForm("username"), nil })
//
// An empty key means the request has none (core.ErrNoKey). The Func works
// only on requests of this package's middleware.
func KeyFunc(f func(*gin.Context) (string, error)) keyfunc.Func {
	return middleware.KeyFunc("ginlimit", "KeyFunc", Context, func(_ keyfunc.Request, c *gin.Context) (string, error) { return f(c) })
}
