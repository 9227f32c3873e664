// Package grpclimit is sluice for gRPC: server interceptors that limit calls
// (and optionally the messages of a stream), and client interceptors that keep
// a client under a provider's quota by deciding before anything is sent.
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limiter)),
//	)
//
// Install it first in the chain (see "Trailers-Only" below).
//
// # What a key function sees
//
// A call is presented to key functions as a keyfunc.Request: Route and Path
// are the full method ("/pkg.Service/Method"), Method is "POST" (every gRPC
// call is an HTTP/2 POST), Header and HeaderValues read the incoming
// metadata (names are matched case-insensitively; HeaderValues returns every
// value of a repeated key), Query is always "", and RemoteAddr is the
// transport peer (peer.FromContext) or "" when the context has none. So
// keyfunc.IP() keys by the peer address, and behind a grpc-gateway or an
// Envoy that appends to x-forwarded-for, keyfunc.IP(keyfunc.TrustProxies(...))
// walks that metadata from the right like the HTTP header. In the client
// interceptors Header reads the outgoing metadata and RemoteAddr is always ""
// (key by keyfunc.Const, keyfunc.Route or the outgoing metadata there).
//
// Message(r) returns the request message being decided (a unary call's
// request, or a stream message checked by WithMessageLimit), so that a key
// can come from the call's own fields, and KeyFunc builds a key function
// from the context, full method and message, as WithCost sees them: a login
// call keyed by its user name is one line (see KeyFunc).
//
// # Stacked interceptors
//
// A global interceptor and a per-service one may both be in the chain
// (grpc.ChainUnaryInterceptor(global, perService)): the call is counted by
// both, and what the handler and the client see is the merge of the two
// Decisions (allowed only if both allowed, the most constraining policy of
// either binding; see docs/policies.md): DecisionFrom returns it, and the
// metadata, sent once, list every policy in ratelimit-policy and name the
// most constraining one in ratelimit and x-ratelimit-*. A denial by the inner
// one is Trailers-Only with the merge's metadata, as a denial by the outer
// one is with its own; each interceptor refunds only its own Decision.
// WithMethodLimiter gives a method a limiter instead of the interceptor's;
// stack interceptors when a call must pass both (or give one Limiter both
// policies, which decides them in one store call).
//
// # Per-method limits
//
// The limiter given to an interceptor applies to every method. WithMethodLimiter
// gives a full method ("/pkg.Service/Method") or a whole service
// ("/pkg.Service/") its own limiter; an exact method wins over its service.
// WithSkipMethods and WithSkip leave methods unlimited, for example the
// health service. The default limiter may be nil when WithMethodLimiter or
// WithMessageLimit say what to limit: methods without a limiter then pass.
//
// # Denials
//
// A denied call ends with codes.ResourceExhausted (HTTP 429 through a
// gateway) whose status carries, as details:
//
//   - errdetails.RetryInfo: the wait until this call would be admitted (the
//     longest wait of the policies that denied it), as the pushback below;
//   - errdetails.QuotaFailure: one violation per policy that denied, with
//     subject "policy:<name>", quota_id the policy and quota_value the
//     capacity applied (an override's or tier's when there is one), and a
//     description of the limit applied;
//   - errdetails.ErrorInfo: reason RATE_LIMIT_EXCEEDED, domain sluice.dev, and
//     metadata policy, limit, remaining, reset_after_ms, retry_after_ms and
//     state of the most constraining policy.
//
// and the trailer grpc-retry-pushback-ms (gRFC A6): the wait plus the time
// the decision took plus a millisecond of margin, in milliseconds rounded
// up, so that a grpc-go (or other) client whose retry policy lists
// RESOURCE_EXHAUSTED retries when the call can pass instead of after its own
// backoff, and a client that counts the pushback from the moment it sent the
// call is not early. RetryInfo and retry_after_ms carry the same
// milliseconds. A call whose cost exceeds a policy's capacity can never be
// admitted: it gets ResourceExhausted without RetryInfo, retry_after_ms "-1"
// and pushback "-1", which tells gRPC clients not to retry.
//
// # Rate-limit metadata
//
// Every limited call, admitted or denied, carries the rate-limit fields of
// package ratelimitfields (ratelimitfields.Config.Format, the values the
// HTTP adapters send as headers, character for character) under lower-case
// keys: ratelimit-policy, ratelimit, x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset, x-ratelimit-state (normal,
// warning or throttled: the warning signal) and, when denied, retry-after.
// WithHeaders selects them as in every adapter. Where they travel:
//
//   - A denied call: in the trailer, with grpc-retry-pushback-ms. The server
//     answers Trailers-Only (a single HEADERS frame, which on the wire is the
//     response's header section), which gRPC requires for the pushback to be
//     honoured and for the call to be retried at all.
//   - An admitted unary call that succeeds: in the response header metadata
//     (grpc.SetHeader, attached after the handler returns, which is before
//     the response is written).
//   - An admitted call whose handler returns an error without having sent
//     headers: in the trailer, so that the response stays Trailers-Only and
//     the application's own errors remain retryable by the client's retry
//     policy (a response with headers is never retried by gRPC).
//   - A stream admitted at open: in the header metadata, attached when the
//     handler sends its first header or message, or when it returns nil; in
//     the trailer when it returns an error before sending anything.
//   - Per-message limits (WithMessageLimit): the decision on the last message
//     received is in the trailer, as x-ratelimit-limit, -remaining, -reset,
//     -state (and retry-after and grpc-retry-pushback-ms when it was denied).
//     The RateLimit and RateLimit-Policy fields are left out there because
//     the ratelimit-headers draft forbids them in trailers.
//   - If a handler sent the header itself (grpc.SendHeader) and then returns,
//     with or without an error, the call's metadata go to a real HTTP/2
//     trailer, without ratelimit and ratelimit-policy, which the draft
//     forbids in trailers.
//
// # Trailers-Only
//
// gRPC retries a call, and honours grpc-retry-pushback-ms, only when the
// server sent no header metadata before the status. An interceptor that runs
// before this one and calls grpc.SetHeader or grpc.SendHeader defeats that
// for denials: put grpclimit first in the chain.
//
// # Streams
//
// StreamServerInterceptor checks a stream once when it opens, exactly as
// UnaryServerInterceptor checks a call: the same decision, metadata,
// denial, error handling and refund (a policy's Refund follows the status
// the stream ends with), the stream's Context carrying the Decision. With
// WithMessageLimit, every message received (ServerStream.RecvMsg) is also
// checked after it is read: a denied message is dropped and RecvMsg returns
// the ResourceExhausted status, which the handler should return as it
// returns any RecvMsg error. In StreamClientInterceptor, WithMessageLimit
// checks each ClientStream.SendMsg before the message is sent; a denied
// message is not sent and the stream stays open, so the caller can wait for
// RetryInfo and send it again.
//
// # Client interceptors
//
// UnaryClientInterceptor and StreamClientInterceptor decide before a call
// leaves the process. A denied call returns the same ResourceExhausted status
// as a server would, without calling the invoker (or streamer); a
// grpc.Trailer call option, if given, receives the rate-limit metadata and
// the pushback. Admitted calls get nothing added: they go out unchanged.
//
// # Failure
//
// If the limiter cannot decide (a store failure, a negative cost, a key
// function or callback that panicked, or no policy with an identity for the
// call), the default is to fail open: the call proceeds without rate-limit
// metadata and the error is logged (WithLogger), at most one line a second.
// WithErrorHandler replaces that: it returns true to let the call through,
// or false and the status to end it with; FailClosed answers
// codes.Unavailable with a generic message. grpc-go does not recover
// panics: the interceptors recover their own callbacks and key functions.
// No error text from a store reaches the client: an error handler's result
// that is not a gRPC status is replaced by Unavailable "rate limit
// unavailable".
//
// Key functions see metadata as sent, bounded only by the server's
// MaxHeaderListSize; keyfunc.IP reads at most keyfunc.MaxHeaderBytes bytes
// and keyfunc.MaxHops entries of x-forwarded-for and falls back to the peer
// beyond that, or when an entry is not an address.
//
// The interceptors are safe for concurrent use; their configuration is fixed
// when they are built. A misconfiguration (a malformed method name in
// WithMethodLimiter or WithSkipMethods, or nothing to limit at all) panics
// then, as a programming error.
package grpclimit
