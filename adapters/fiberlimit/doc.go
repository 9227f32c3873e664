// Package fiberlimit is sluice's Fiber v2 middleware. It runs on fasthttp
// natively: requests are never converted to net/http.
//
//	app.Use(fiberlimit.New(limiter))
//
// or, for a limit of its own, on one route or group:
//
//	app.Post("/login", fiberlimit.New(loginLimiter), login)
//
// Responses carry the same headers as every sluice adapter (RateLimit-Policy,
// RateLimit, X-RateLimit-Limit, -Remaining, -Reset, X-RateLimit-State, and
// Retry-After on 429), formatted by package httplimit; a denied request gets
// 429 with an RFC 9457 application/problem+json body naming the violated
// policies. See httplimit for the exact syntax. fasthttp normalizes header
// names unless Config.DisableHeaderNormalizing is set, so on the wire they
// read "Ratelimit-Policy", "X-Ratelimit-Limit" and so on, as with net/http;
// header names are case-insensitive.
//
// The Decision is in c.Locals(DecisionKey), and DecisionFrom returns it, so
// handlers can see the warning state. Like Fiber's own values it is valid
// only within the request (see DecisionFrom): the middleware reuses it for
// a later request, so that an allowed request costs it no allocation.
//
// Failure: if the limiter cannot decide (a store failure, a key function or
// callback that panicked, or no policy with an identity for the request),
// the default is to fail open: the request proceeds without rate-limit
// headers and the error is logged (WithLogger), at most one line a second.
// WithErrorHandler replaces that: it returns true to continue, or false and
// the middleware's result (fiber.ErrServiceUnavailable, say). fasthttp does
// not recover panics: the middleware recovers its own callbacks and key
// functions, so none of them can take the process down.
//
// # Paths
//
// Fiber routes "/LOGIN" and "/login/" to "/login" by default
// (Config.CaseSensitive and Config.StrictRouting are off). The Path that
// Match.Routes compares follows the same rules: lower case unless
// CaseSensitive, trailing slashes removed unless StrictRouting, decoded when
// UnescapePath. Write route policies in lower case for such an app.
//
// # Route templates
//
// The Route of the keyfunc.Request is c.Route().Path: the template of the
// route the middleware is registered on. Fiber runs app.Use middleware before
// the endpoint is matched, so under app.Use it is the Use prefix ("/"), and
// keyfunc.Route keys every path alike; register the middleware on the route
// or group (app.Get("/users/:id", fiberlimit.New(l), h)) to key by endpoint.
//
// # Client addresses
//
// RemoteAddr is the transport peer (c.Context().RemoteAddr()), never a
// header, so keyfunc.IP with its trusted-proxy options is the way to find the
// client behind proxies. FrameworkIP, which uses Fiber's c.IP(), is available but
// trusts a header any client can write unless Fiber is configured otherwise;
// read its warning first.
//
// # Lifetime of request values
//
// fasthttp reuses a request's buffers once its handler returns. The strings
// of the keyfunc.Request view (Method, Path, Header, HeaderValues, Query)
// point into them, without a copy: they are valid only while the key function
// or hook that received them runs, which is all the keyfunc.Request contract
// allows. A key function or core hook that keeps one (in a channel, a
// goroutine, a cache) must copy it with strings.Clone; so must one that
// keeps the key keyfunc.IP gives an IPv4 peer, which is the peer's text
// in the middleware's per-request state (keyfunc.PeerTextRequest), reused
// after the request as the Decision is. Everything the
// middleware itself keeps beyond the request is independent of those
// buffers:
//
//   - the store key is a new string built by core.Limiter from the identity
//     and the policy name, so a Store (and a Redis call still running after a
//     timeout) never holds request memory;
//   - every string in the Decision stored in c.Locals is owned by the
//     Limiter and the Store, so a handler may keep a copy of a
//     core.PolicyResult; the *core.Decision itself is the middleware's, and
//     is reused after the request (DecisionFrom), as Fiber reuses the Ctx;
//   - the context passed to the limiter and the store is c.UserContext(), not
//     the pooled *fasthttp.RequestCtx, which is recycled with the request;
//   - header values are copied into the response by fasthttp.
//
// A Limiter serves any number of middlewares; the handler New returns is safe
// for concurrent use.
package fiberlimit
