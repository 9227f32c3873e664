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
// trust; gin's own c.ClientIP() is opt-in through ClientIP, which explains
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
// Failure: if the limiter cannot decide (no identity for the request, or the
// store failed), the default is to fail open: the request proceeds without
// rate-limit headers and the error is logged (WithLogger). WithErrorHandler
// replaces that, for example to answer 503. No error text reaches the client
// unless the error handler writes it.
//
// The middleware is safe for concurrent use; its options are read once, by
// New.
package ginlimit
