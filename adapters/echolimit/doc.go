// Package echolimit is sluice's middleware for Echo v4.
//
//	e := echo.New()
//	e.Use(echolimit.New(limiter))
//
// It writes the same headers as every sluice adapter, formatted by httplimit:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10),
// X-RateLimit-Limit, -Remaining and -Reset, X-RateLimit-State (normal,
// warning, throttled) and, on a denial, Retry-After. See package httplimit
// for the meaning of each field.
//
// A denial takes Echo's error path: the middleware returns an *echo.HTTPError
// with Code 429 (see DeniedHandler) and e.HTTPErrorHandler answers. With
// Echo's default error handler the body is the RFC 9457
// application/problem+json document naming the violated policies; a custom
// error handler sees the 429 like any other error and may render it its own
// way. WithDeniedHandler replaces the error, or writes a response itself and
// returns nil.
//
// Route-based policies and keyfunc.Route see c.Path(), the route template
// ("/users/:id"), so register the middleware with e.Use, a group or a route,
// not e.Pre, which runs before routing. The client address is the transport
// peer (RemoteAddr), and forwarding headers count only from the proxies
// keyfunc.IP is told to trust; Echo's c.RealIP() is opt-in through FrameworkIP,
// which explains why it is unsafe unless e.IPExtractor is set.
//
// Per-route limits are middleware on a route or group, each with its own
// Limiter, identity (WithKey) or cost (WithCost):
//
//	e.POST("/login", login, echolimit.New(loginLimiter))
//	api := e.Group("/api", echolimit.New(apiLimiter, echolimit.WithKey(keyfunc.Header("X-API-Key"))))
//
// The Decision is stored in the echo.Context (DecisionFrom, or
// c.Get(DecisionKey)), so handlers and error handlers can see it.
//
// Failure: if the limiter cannot decide (a store failure, a key function or
// callback that panicked, or no policy with an identity for the request),
// the default is to fail open: the request proceeds without rate-limit
// headers and the error is logged (WithLogger), at most one line a second.
// WithErrorHandler replaces that: it returns true to continue to the
// handler, or false and the middleware's result (echo.ErrServiceUnavailable,
// say). No error text reaches the client unless the error handler puts it
// there.
//
// Paths: the Path Match.Routes compares is the path as Echo's router matched
// it (RawPath when set, so "/files/a%2Fb" is one segment); a spelling of a
// path that reaches a route's handlers is counted as that route. See
// docs/keys.md.
//
// The middleware is safe for concurrent use; its options are read once, by
// New.
package echolimit
