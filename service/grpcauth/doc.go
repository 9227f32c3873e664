// Package grpcauth guards ratelimitd's administrative gRPC methods with
// the admin tokens of its rules database (package adminauth): a unary and
// a stream server interceptor that read `authorization: Bearer slk_…`
// metadata, check the token (adminauth.Auth.Authenticate and its cache:
// a revocation takes up to the cache's TTL to reach an instance) and its
// scope, and count administrative calls against the token's admin limits.
//
// What a method needs is its Access. ratelimitd's table (Ratelimitd):
//
//   - the changes an admin makes are Admin: a token of scope write,
//     counted against the token's admin_write limit (100 a minute by
//     default), the same count as the admin REST API's writes: ResetLimit
//     of the native API, and the store API's Reset, SetOverride and
//     ClearOverride (and any method the store API gains later). The
//     handler gets the call's Principal (adminauth.PrincipalFrom) and
//     request id (rulesdb.RequestID, from x-request-id metadata or new,
//     sent back), the actor and request id of the change's audit row;
//   - the store API's decisions (sluice.ratelimit.v1.StoreService: Take,
//     TakeBatch, Refund) are Token: a token of scope write, not counted
//     (they are the data plane of the apps using ratelimitd as their
//     store, a call per request);
//   - everything else is Open: CheckRateLimit, CheckRateLimitBatch,
//     GetRemainingQuota, Report, Envoy's ShouldRateLimit, health and
//     reflection.
//
// A refusal never says whether a token exists: no token, a malformed one,
// an unknown and a revoked one are all UNAUTHENTICATED with one message;
// a live token of scope read is PERMISSION_DENIED; an exhausted admin
// limit is RESOURCE_EXHAUSTED with RetryInfo (as package grpclimit
// answers); a client (its peer address: IPv4, or IPv6 /64) past its
// budget of failed authentications is RESOURCE_EXHAUSTED for any secret
// not in the cache, without a database lookup (as the admin API's 429).
// A failure of the token database or the rate-limit store is
// UNAVAILABLE with a generic message, its cause only logged: guarded
// methods fail closed.
package grpcauth
