// Package config loads sluice policies from a YAML or JSON file and keeps a
// Limiter in step with it.
//
// Errors name the file, the line and the field ("config: limits.yaml:14:
// policies[2].limit: must be a whole number >= 1, got "0""). A file that
// fails to load never replaces good policies: Watch keeps the last good set
// and reports why. The schema, with a full example, is in docs/config.md.
//
// A policy is spelled as ratelimitd's rules file and admin API spell a rule
// (limit, window_seconds, endpoint_pattern, algorithm, burst). The names of
// before (rate, period, match.routes) are still read with their meaning,
// and a file using them logs a deprecation notice each time it is read
// (WithLogger; File.Deprecated).
//
// It is its own module, so that programs that do not read config files do
// not depend on a YAML parser.
package config
