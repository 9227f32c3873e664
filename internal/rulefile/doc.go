// Package rulefile reads what the library's config file (package config) and
// ratelimitd's rules file (service/rules) share: the size-capped read, the
// YAML document with syntax errors on the line they are on, a strict walk of
// its mappings (every unknown, repeated or doubly spelled field an error
// naming file, line and field), the scalars (strings, booleans, whole
// numbers, durations, seconds) and the rule vocabulary itself: a rule's
// name, its limit (algorithm, limit, window_seconds, burst), its endpoint
// patterns and its tiers. The two packages add what is theirs (the
// library's keys, methods, refunds and failure section; the service's
// dimensions, domains, tier assignments and Envoy's format) over it.
//
// # One vocabulary
//
// A limit is spelled as ratelimitd's admin API spells it, the names of the
// design notes' rule table: limit (the count per window), window_seconds
// (the window, in seconds), endpoint_pattern, algorithm, burst. The admin
// API, its database columns, GET /users/{id}/limits and the rules export
// already used them, and their clients exist; window_seconds is a number
// that every JSON reader reads without a duration parser. The files now use
// the same names, so a rule reads the same in a file, in a request and in
// the database; a file's window_seconds may be fractional (0.5, down to a
// microsecond), as the database's whole seconds cannot be.
//
// The names the files used before are still read, with their old meaning
// and syntax, and listed in one deprecation notice per file read (Old
// holds them): rate is limit, period (a Go duration) is window_seconds,
// routes (the library's match.routes) and endpoints (the rules file's) are
// endpoint_pattern. A mapping that gives a field under both names is an
// error naming both.
//
// The package is internal: its API is no promise, and it is the one place
// that imports a YAML parser for the root module.
package rulefile
