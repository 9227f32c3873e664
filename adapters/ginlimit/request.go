package ginlimit

import (
	"context"
	"errors"
	"net/netip"

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
	tmpl := (*gin.Context)(r).FullPath()
	if tmpl == "" || middleware.Conforms(tmpl, p) {
		if tmpl == "" {
			return middleware.CleanPath(p)
		}
		return p
	}
	if c := middleware.CleanPath(p); middleware.Conforms(tmpl, c) {
		return c
	}
	if c := middleware.CleanPath(r.Request.URL.Path); middleware.Conforms(tmpl, c) {
		return c
	}
	return tmpl
}

func (r *request) Header(name string) string         { return r.Request.Header.Get(name) }
func (r *request) HeaderValues(name string) []string { return r.Request.Header.Values(name) }
func (r *request) Query(name string) string          { return (*gin.Context)(r).Query(name) }
func (r *request) RemoteAddr() string                { return r.Request.RemoteAddr }

// Request returns the keyfunc.Request view of c, for key functions used
// outside the middleware.
func Request(c *gin.Context) keyfunc.Request { return (*request)(c) }

var errNotGin = errors.New("ginlimit: ClientIP: not a request of the ginlimit middleware")

// ClientIP returns a key function that keys a request by gin's c.ClientIP(),
// for apps whose engine already knows its proxies. IPv6 clients are grouped
// by /64 and IPv4-mapped addresses folded, as keyfunc.IP does; a value that
// is not an IP address falls back to the transport peer.
//
// WARNING: with gin's defaults the client chooses this key. A gin.Engine
// trusts every proxy (0.0.0.0/0 and ::/0) and ForwardedByClientIP is on, so
// c.ClientIP() is the leftmost X-Forwarded-For entry, which any client can
// write, getting a fresh bucket per request. Use it only after
// engine.SetTrustedProxies names your proxies (or nil to ignore headers), or
// with engine.TrustedPlatform set to a header your edge overwrites. Without
// proxies, prefer keyfunc.IP(), which reads the transport peer and walks
// forwarding headers only from proxies you trust.
func ClientIP() keyfunc.Func {
	return func(r keyfunc.Request) (string, error) {
		v, ok := r.(*request)
		if !ok {
			return "", errNotGin
		}
		a, err := netip.ParseAddr((*gin.Context)(v).ClientIP())
		if err != nil {
			var peer keyfunc.IPExtractor // the transport peer only
			return peer.Key(r)
		}
		if a = a.Unmap().WithZone(""); a.Is4() {
			return a.String(), nil
		}
		p, _ := a.Prefix(64)
		return p.String(), nil
	}
}
