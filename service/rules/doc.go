// Package rules holds ratelimitd's rules: the rule model, the two file
// formats it reads, their validation, the immutable Snapshot the engine
// decides under, and the Source the rules come from (a file, hot-reloaded;
// a database: package rulesdb).
//
// # Our format
//
// A rule is spelled as ratelimitd's admin API spells it, and as the config
// module spells a policy (the shared reader, internal/rulefile, reads both
// files), with dimensions, endpoints and tiers:
//
//	rules:
//	  - name: orders-per-user      # the rule ID and core policy name
//	    dimension: user            # required: user, ip, api_key or any name
//	    endpoint_pattern: [/api/v1/orders, /api/v1/orders/*]   # omitted: every endpoint
//	    algorithm: gcra                                        # default token_bucket
//	    limit: 100                 # requests per window
//	    window_seconds: 60         # seconds, to the microsecond (0.5)
//	    burst: 120                 # bucket algorithms only
//	    tiers: {pro: {limit: 1000, window_seconds: 60}}
//	    shadow: false
//	    domain: ""                 # optional
//	tier_assignments:              # optional: dimension -> identifier -> tier
//	  user: {alice: pro}
//
// The names of before are still read with their meaning: rate is limit,
// period (a Go duration) is window_seconds, endpoints is endpoint_pattern.
// A file using them logs one deprecation notice each time its content is
// read (WithLogger); a rule giving a field under both names is an error
// naming both.
//
// Endpoint patterns are core.Match.Routes patterns ("*", ":name" and
// "{name}" stand for one segment, a final "**" for any rest), matched by
// the same trie. A check with an empty endpoint matches only the rules
// without endpoints.
//
// # envoyproxy/ratelimit's format
//
// A file whose top level has domain: or descriptors: (and no rules:) is read
// as envoyproxy/ratelimit reads it: every field it accepts (key, value,
// rate_limit {unit, requests_per_unit, unlimited, name, replaces},
// shadow_mode, quota_mode, detailed_metric, value_to_metric,
// share_threshold, nested descriptors) and its errors (unknown keys, a
// repeated key_value on one level, an empty key or domain, an invalid unit,
// a unit on an unlimited limit, empty or self replaces). A rate_limit is a
// fixed window of the unit's length, as envoyproxy/ratelimit counts: SECOND,
// MINUTE, HOUR, DAY, WEEK (7 days), MONTH (30 days), YEAR (365 days),
// windows aligned on the Unix epoch. Two extension fields of rate_limit,
// algorithm: (one of the six) and burst:, count it another way.
// requests_per_unit: 0 (a ban list in envoyproxy/ratelimit's own example)
// makes a Deny rule: every request it matches is denied, nothing counted.
// quota_mode is accepted and kept but not applied. A rule's ID is its
// rate_limit name when that is a valid, unused rule name, else its path
// (domain.key_value.key) folded into the rule-name characters, shortened
// with a hash suffix when longer than 64 characters or taken.
//
// Snapshot.MatchDescriptor matches as envoyproxy/ratelimit does. A rules
// path may also be a directory of files (envoyproxy/ratelimit's layout:
// one domain per file; a domain in two files is an error).
//
// # Errors
//
// A file is validated as a whole and every error is reported, each as
// "rules file FILE:LINE: field: message" (a YAML syntax error at the line it
// is on), joined with errors.Join; a file that cannot be read is one error,
// "rules file FILE: reason".
package rules
