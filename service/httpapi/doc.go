// Package httpapi serves ratelimitd's HTTP JSON API for callers without
// gRPC: POST /api/v1/rate-limit/check.
//
// A check is a JSON object:
//
//	{"key_type": "user", "key_value": "alice", "endpoint": "/api/v1/orders",
//	 "request_count": 1, "idempotency_key": "order-42"}
//
// key_type (the dimension) and key_value (the identifier) are required;
// rule_id decides under one rule instead of those matching the endpoint;
// request_count defaults to 1, and 0 peeks without consuming. The answer is
//
//	{"allowed": true, "limit": 10, "remaining": 9,
//	 "reset_at": "2026-11-24T03:00:06.25Z", "retry_after": 0,
//	 "rule": "orders-per-user", "state": "normal"}
//
// with the rate-limit header fields the middleware sends: RateLimit,
// RateLimit-Policy, X-RateLimit-Limit, -Remaining, -Reset, -State, and
// Retry-After on a denial. retry_after is in seconds, fractional (rounded up
// to the millisecond), null when the check can never pass.
//
// When the limiter could not decide on its store, the answer says which
// failure mode answered instead, in "degraded" ("fail_open", "fail_closed"
// or "fallback") and in a Sluice-Degraded header; under fail_open and
// fail_closed no counter was read: remaining and reset_at are null, and
// limit is the rule's.
//
// By default a denial is 200 with "allowed": false. In status mode (the
// handler option WithStatusMode, or ?mode=status on a request) a denial is
// answered 429 with Retry-After (or 403/401: WithDenyStatus,
// ?deny_status=403) and an admission 200, for proxies that read only the
// status. A request without a body (GET, or nginx auth_request's
// subrequest, a GET without body that carries the original request's
// headers unless proxy_pass_request_headers is off) takes its fields from
// query parameters of the same names. When the query names the key
// (key_type or key_value), as a proxy's subrequest does, that is all: any
// body is ignored and no Sluice-* header is read, since the headers may be
// the client's (a client repeating its own Sluice-Idempotency-Key would
// get free requests; a proxy that wants an idempotency key puts it in the
// query). Otherwise the fields come from the headers Sluice-Key-Type,
// Sluice-Key-Value, Sluice-Rule-Id, Sluice-Endpoint, Sluice-Request-Count
// and Sluice-Idempotency-Key (a header given twice is 400), and a setup
// that passes the key in headers must forward no other header (or set or
// clear every Sluice-* one), or a client could send Sluice-Request-Count: 0
// (a peek), a Sluice-Endpoint no rule matches or another Sluice-Rule-Id,
// and escape its limit.
//
// Without an endpoint, the endpoint is the path nginx chose its location
// on ($uri), computed from X-Original-URI, nginx's $request_uri (the
// target as the client wrote it), exactly as nginx computes it: query and
// fragment dropped, %XX decoded (a decoded / and . act as such, a decoded
// %, # and ? do not), slashes merged (not with ?merge_slashes=off, for
// nginx's merge_slashes off), dot segments resolved. A target nginx refuses
// (a broken escape, %00, a .. above the root) is 400 naming
// X-Original-URI, never decided on as written. Other endpoints (the JSON
// body, the endpoint parameter, Sluice-Endpoint) are taken as given.
//
// nginx auth_request admits on 2xx, denies on 401 and 403, and answers 500
// for any other status, so behind it ask for 403 and turn it into 429:
//
//	location /api/ {
//	    auth_request /ratelimit;
//	    auth_request_set $retry_after $upstream_http_retry_after;
//	    error_page 403 = @ratelimited;
//	    proxy_pass http://app;
//	}
//	location = /ratelimit {
//	    internal;
//	    proxy_pass http://127.0.0.1:8080/api/v1/rate-limit/check?mode=status&deny_status=403&key_type=ip&key_value=$remote_addr;
//	    proxy_pass_request_body off;
//	    proxy_pass_request_headers off;
//	    proxy_set_header Content-Length "";
//	    proxy_set_header X-Original-URI $request_uri;
//	}
//	location @ratelimited {
//	    add_header Retry-After $retry_after always;
//	    return 429;
//	}
//
// Errors are RFC 9457 application/problem+json whose detail, and member
// "field", name the field at fault: 400 for an unknown field, a wrong type,
// a missing or oversized value, malformed JSON or a JSON string that is not
// valid UTF-8 (checked in the raw bytes, before decoding would turn it into
// U+FFFD; a query or header carries an identifier's bytes as they are), 413 for a body over 64 KiB,
// 415 for a body that is not application/json, 405 for another method, and
// 503 with a generic detail when no decision could be made (the cause is
// logged, never sent).
package httpapi
