// Package adminui serves ratelimitd's admin page under /admin/: plain
// server-rendered HTML (html/template, no JavaScript, the stylesheet inline,
// everything embedded in the binary) showing the rules with their live
// usage, a caller's effective limits, the overrides in force, the audit
// trail and the callers warned or throttled in the last minutes, and the
// forms that change them; and, given a traffic.Recorder, the traffic of
// the instance and of each rule as SVG charts drawn by the server (and the
// fleet's, summed from Redis, given a traffic.Fleet), with the callers
// throttled now and the most throttled in the last hour.
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
// A read-scope token views everything; every change needs the write scope.
// With it the page creates, edits and deletes rules, assigns and removes a
// caller's tier, and sets (a block, or a limit of the caller's own, each
// with an expiry) and clears a caller's overrides. Each form is sent, as the
// admin API's JSON request, to the admin API's own handler
// (adminapi.NewAuthenticated) under the session's principal and the page
// request's id: it is checked, written and audited exactly as the same
// request to the API, with the token's name as the actor, and the API's
// refusals are shown next to the fields they name (the form's fields are
// the API's members), with nothing written. An edit or a deletion is made
// If-Match the version (ETag) the page was shown, so one made on a stale
// page is refused, never applied over another change. With Options.Sync a
// change is answered once it is in force on this instance.
//
// Every response carries a Content-Security-Policy that allows no script,
// frame, image or connection and only the page's own stylesheet,
// X-Frame-Options DENY, Referrer-Policy no-referrer and Cache-Control
// no-store.
package adminui
