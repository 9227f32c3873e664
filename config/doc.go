// Package config loads sluice policies from a YAML or JSON file and keeps a
// Limiter in step with it.
//
// Errors name the file, the line and the field ("limits.yaml:14:
// policies[2].rate: must be at least 1, got 0"). A file that fails to load
// never replaces good policies: Watch keeps the last good set and reports
// why. The schema, with a full example, is in docs/config.md.
//
// It is its own module, so that programs that do not read config files do
// not depend on a YAML parser.
package config
