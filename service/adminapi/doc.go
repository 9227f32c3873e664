// Package adminapi serves ratelimitd's admin REST API under /api/v1/: the
// rules of a rules database (rulesdb), callers' tiers and temporary
// overrides, their effective limits and usage, and the audit of every
// change. JSON in and out; every error is RFC 9457
// application/problem+json naming the field at fault. New returns the
// handler behind adminauth's Wrap: a bearer token (read scope for GET and
// HEAD, write for the rest), per-token rate limits, a request id and
// Idempotency-Key on POST.
//
// # Resources
//
// The {id} of /users is the caller's identifier (path-escaped; 1 to 1024
// bytes); ?dimension= gives its dimension, "user" by default.
//
//	GET    /api/v1/rules                      list (?limit= 1-1000, 100; ?cursor=; ?dimension= ?tier= ?algorithm= ?enabled=)
//	POST   /api/v1/rules                      create: 201, Location, ETag; 409 if the id exists
//	GET    /api/v1/rules/{id}                 read: ETag; If-None-Match -> 304
//	PUT    /api/v1/rules/{id}                 replace: If-Match required (428 without, 412 stale); 200, ETag
//	DELETE /api/v1/rules/{id}                 delete (and its overrides): If-Match required; 204
//	GET    /api/v1/users/{id}/limits          every rule that applies, tier and override resolved, usage now
//	PUT    /api/v1/users/{id}/tier            {"tier": "gold"}; "" clears; 200
//	GET    /api/v1/users/{id}/override        the caller's overrides in force
//	POST   /api/v1/users/{id}/override        {rule_id, limit, window_seconds | block, expires_at | ttl_seconds}: 201
//	DELETE /api/v1/users/{id}/override/{rule} 204; 404 when none
//	GET    /api/v1/audit                      ?actor= ?target= ?since= ?until= ?order= ?cursor= ?limit=
//
// # Rules
//
// A rule is the JSON object of rulesdb.Rule: id (1 to 64 of a-z A-Z 0-9 _
// . : -), name (free text, at most 256 bytes), dimension, endpoint_pattern
// ("" matches every endpoint), limit, window_seconds, algorithm
// (token_bucket, leaky_bucket, gcra, fixed_window, sliding_window_log,
// sliding_window_counter), tier ("" for the base rule), burst, shadow,
// lease_seconds (0: none; the base rule's only; see core/lease) and
// enabled (true when absent); the store sets etag, revision, created_at and
// updated_at, which a request may carry back (a rule read can be PUT
// again) and which are ignored. A PUT replaces the whole rule; its body's
// id must be the path's or absent.
//
// A rule is checked as strictly as the rules file before anything is
// written: each field alone (400 naming it), then the set it would make
// with the stored rules, as the engine would load it (409 naming the
// field: a second rule without a tier for one dimension and endpoint
// pattern, a tier row without its base rule, removing or disabling a base
// rule that still has tier rows). A refused request changes nothing.
//
// ETags are the revision of the rule's last write, strong ("7"). If-Match
// takes "*" or a list of strong tags; a weak tag never matches it.
//
// # Pages
//
// Lists are paged by key: ?limit= (1 to 1000, 100 by default) and the
// opaque ?cursor= of the previous page's next_cursor ("" on the last page),
// which the Link header's rel="next" URL also carries with the same
// filters. A rule (or an audit entry) that exists throughout a listing is
// listed exactly once, whatever is written between its pages.
//
// # Users
//
// GET /users/{id}/limits reports, for every rule of the caller's dimension
// in force on this instance (on every endpoint), the limit that applies to
// the caller and where it comes from ("rule", "tier", "override"), the
// override in force, whether the caller is blocked, and its counter
// (capacity, remaining, used, reset_at, state), peeked without consuming
// anything. A tier is any name (1 to 64 bytes); a tier no rule defines
// changes nothing until one does. An override replaces the caller's
// limit under one enabled base rule (limit and window_seconds, checked
// under the rule's algorithm) or blocks it ("block": true, no limit); it
// expires at expires_at (RFC 3339) or after ttl_seconds, in the future and
// at most 30 days ahead, and lapses at that instant with no write. A
// second override of the same rule replaces the first.
//
// # Audit
//
// GET /audit lists the audit entries (revision, at, actor, action,
// target, before, after, request_id), oldest first (?order=newest for the
// newest first), filtered by actor (a token's name), target (exact, e.g.
// rule/orders, or a prefix ending in "/", e.g. override/user/alice/) and
// time (since inclusive, until exclusive, RFC 3339).
//
// # Errors
//
// Every error is application/problem+json: {"type": "about:blank",
// "title", "status", "detail", "instance", "errors": [{"field",
// "message"}]}. 400 (malformed JSON, an unknown or repeated member,
// trailing data, a wrong type, a missing or invalid field, an unknown or
// repeated query parameter; text that is not valid UTF-8 in a body, a query
// parameter or a path segment, checked in the raw bytes before decoding
// and named by its field), 401/403/429 (adminauth), 404 (no such rule,
// override or resource), 405 with Allow, 409 (the id exists; the rule set
// would be invalid), 412 (stale If-Match), 413 (a body over 64 KiB), 415
// (a body not application/json), 422 (an Idempotency-Key reused with
// another body), 428 (no If-Match), 503 (the database failed or did not
// answer in time: the cause is logged, never sent).
//
// # In force
//
// With Options.Sync, a write is answered once the revision it committed
// (or a later one) is in force on this instance: the checks sent after the
// answer are decided under it. A write committed but not in force in time,
// or one the instance refuses to put in force (the stored rule set is
// invalid), is answered 503 with "revision" (committed) and
// "revision_in_force" (this instance's) members; the change is stored.
package adminapi
