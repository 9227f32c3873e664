// Package adminapi serves ratelimitd's admin REST API under /api/v1/: the
// rules of a rules database (rulesdb), callers' tiers and temporary
// overrides, their effective limits, and the audit of every change. JSON
// in and out; every error is RFC 9457 application/problem+json naming the
// field at fault.
//
// Resources (the {id} of /users is the caller's identifier; ?dimension=
// gives its dimension, "user" by default):
//
//	GET    /api/v1/rules                    list: ?limit= (1-1000, 100), ?cursor=, ?dimension=, ?tier=, ?algorithm=, ?enabled=
//	POST   /api/v1/rules                    create: 201, Location, ETag
//	GET    /api/v1/rules/{id}               read: ETag; If-None-Match -> 304
//	PUT    /api/v1/rules/{id}               replace: If-Match required (428 without, 412 stale)
//	DELETE /api/v1/rules/{id}               delete: If-Match required; 204
//	GET    /api/v1/users/{id}/limits        every rule that applies, tier and override resolved, usage now
//	PUT    /api/v1/users/{id}/tier          {"tier": "gold"}, "" clears
//	GET    /api/v1/users/{id}/override      the caller's overrides in force
//	POST   /api/v1/users/{id}/override      {rule_id, limit, window_seconds | block, expires_at | ttl_seconds}: 201
//	DELETE /api/v1/users/{id}/override/{rule}  204; 404 when none
//	GET    /api/v1/audit                    ?actor=, ?target=, ?since=, ?until=, ?order=, ?cursor=, ?limit=
//
// A request is validated as strictly as the rules file before anything is
// written, and a refused request changes nothing. The actor of every write
// is the authenticated caller (adminauth wraps the handler); a database
// failure is answered 503 with a generic detail and logged.
package adminapi
