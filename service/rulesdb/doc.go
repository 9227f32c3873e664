// Package rulesdb keeps ratelimitd's rules, user tiers, overrides and the
// audit of every change in a SQL database: SQLite (the pure-Go
// modernc.org/sqlite driver; one instance) or PostgreSQL (pgx v5; a
// fleet), with the same schema and queries on both.
//
// Open applies the schema's migrations (a schema_version table records the
// last one applied; a database written by a newer ratelimitd is refused).
// Every write runs in one transaction that bumps the global revision, stamps
// the changed rule with it (its etag) and appends one audit row; on
// PostgreSQL the transaction first locks the revision row, so writes
// serialize and revisions stay dense, and it notifies the channel
// NotifyChannel with the new revision. Source serves the database to the
// engine as a rules.Source: it watches the revision and loads a new
// validated snapshot when it moves; Source.Sync has it load the revision a
// write just committed at once and returns once that revision is in force
// (read-your-writes for the instance that wrote); Source.Listener reports
// the health of its PostgreSQL listener.
//
// Every call on the database is bounded (WithTimeout, DefaultTimeout): a
// database that stops answering fails the call with an error wrapping
// context.DeadlineExceeded, and a write cut short is rolled back whole.
package rulesdb
