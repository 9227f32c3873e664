// Package adminui serves ratelimitd's admin page under /admin/: plain
// server-rendered HTML (html/template, no JavaScript, the stylesheet inline,
// everything embedded in the binary) showing the rules with their live
// usage, a caller's effective limits, the overrides in force, the audit
// trail and the callers warned or throttled in the last minutes, and an
// edit form for each rule.
//
// Signing in takes an admin token (the tokens of the admin API, checked by
// adminauth.Auth.Authenticate). The browser then holds only an opaque
// session id in an HttpOnly, SameSite=Strict cookie (Secure over TLS); the
// token stays in the server's memory, bound to the session. Every request
// of the session goes through adminauth.Auth.Wrap with that token, as an
// admin API call would: a revoked token ends its sessions (within
// adminauth's authentication cache time), and the token's admin rate
// limits count the page's views and saves. Sessions expire after 30
// minutes idle and 8 hours in all, and the server keeps at most 1000
// (signing in beyond that ends the least recently used one); they live in
// one instance's memory. Every form carries the session's CSRF token,
// checked on every POST, which must also come from the page's own origin
// (Sec-Fetch-Site, or Origin).
//
// A read-scope token views everything; saving a rule needs the write scope.
// A rule is saved through rulesdb.DB.Update with the version (ETag) the
// form was rendered from, so an edit made on a stale page is refused with a
// message, never applied over another change; every save is audited with
// the token's name as the actor.
//
// Every response carries a Content-Security-Policy that allows no script,
// frame, image or connection and only the page's own stylesheet,
// X-Frame-Options DENY, Referrer-Policy no-referrer and Cache-Control
// no-store.
package adminui
