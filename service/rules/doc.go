// Package rules holds ratelimitd's rules: the rule model, the two file
// formats it reads (its own YAML, extending the config module's policy
// format with dimensions, endpoints and tiers, and envoyproxy/ratelimit's
// domain and descriptors), their validation with FILE:LINE: field errors,
// the immutable Snapshot the engine decides under, and the Source the rules
// come from (a file, hot-reloaded; a database in issue 15).
package rules
