// Package ginlimit is sluice's middleware for Gin.
//
//	r := gin.New()
//	r.Use(ginlimit.New(limiter))
//
// It writes the same headers as every sluice adapter, formatted by httplimit:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10),
// X-RateLimit-Limit, -Remaining and -Reset, X-RateLimit-State (normal,
// warning, throttled) and, on a denial, Retry-After. A denied request gets
// 429 with an RFC 9457 application/problem+json body naming the violated
// policies, and the chain is aborted; WithDeniedHandler replaces that
// answer. See package httplimit for the meaning of each field.
//
// Route-based policies and keyfunc.Route see c.FullPath(), the route
// template ("/users/:id"), or the path for requests no route matched. The
// client address is the transport peer (c.Request.RemoteAddr), and
// forwarding headers count only from the proxies keyfunc.IP is told to
// trust; gin's own c.ClientIP() is opt-in through FrameworkIP, which explains
// why it is unsafe with gin's defaults.
//
// Per-route limits are middleware on a route or group, each with its own
// Limiter, identity (WithKey) or cost (WithCost):
//
//	r.POST("/login", ginlimit.New(loginLimiter), login)
//	api := r.Group("/api", ginlimit.New(apiLimiter, ginlimit.WithKey(keyfunc.Header("X-API-Key"))))
//
// The Decision is stored in the gin.Context (DecisionFrom, or
// c.Get(DecisionKey)), so handlers can see the warning state.
//
// Failure: if the limiter cannot decide (a store failure, a key function or
// callback that panicked, or no policy with an identity for the request),
// the default is to fail open: the request proceeds without rate-limit
// headers and the error is logged (WithLogger), at most one line a second.
// WithErrorHandler replaces that: it returns true to continue, or false once
// it has answered (the chain is then aborted). No error text reaches the
// client unless the error handler writes it.
//
// Paths: the Path Match.Routes compares is the path as gin's router matched
// it (its RemoveExtraSlash, UseRawPath and UseEscapedPath included): a
// spelling of a path that reaches a route's handlers is counted as that
// route. See docs/keys.md.
//
// The middleware is safe for concurrent use; its options are read once, by
// New.
package ginlimit
