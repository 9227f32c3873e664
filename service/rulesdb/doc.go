// Package rulesdb keeps ratelimitd's rules, user tiers, overrides and the
// audit of every change in a SQL database (SQLite through the pure-Go
// modernc.org/sqlite driver; the SQL is kept portable to PostgreSQL), and
// serves them to the engine as a rules.Source.
//
// Open applies the schema's migrations (a schema_version table records the
// last one applied; a database written by a newer ratelimitd is refused).
// Every write runs in one transaction that bumps the global revision, stamps
// the changed rule with it (its etag) and appends one audit row; Source
// polls that revision and loads a new validated snapshot when it moves.
package rulesdb
