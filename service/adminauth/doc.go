// Package adminauth guards ratelimitd's admin API: Wrap puts a handler
// behind a request id, bearer-token authentication against the tokens of
// a rules database (rulesdb.CreateToken), the token's scope (read for GET
// and HEAD, write for everything else), a per-token rate limit decided by
// sluice itself (a core.Limiter over the service's store: 1000 reads and
// 100 writes a minute by default, answered with the standard rate-limit
// headers of package ratelimitfields) and Idempotency-Key on POST.
//
// Authentication results are cached in memory for Options.CacheTTL (5 s by
// default) so the database is off the hot path: a revoked token keeps
// working on an instance that has just seen it for at most that long.
// Give the admin API (adminapi) and the admin page (adminui) of an
// instance the same Auth, as ratelimitd does: they then share that cache,
// so a revocation reaches both at the same moment.
// The rate-limit store failing fails closed (503): the admin API is never
// left unlimited.
package adminauth
