package main

import (
	"flag"
	"fmt"
	"io"
	"time"
)

// dbFlag defines --db on fs, the rules database of `rules` and `token`.
// Its environment fallback is read by dbDSN after parsing, never given as
// the flag's default: -h would print it, password and all.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "", "the rules database: file:PATH (SQLite) or postgres://... (PostgreSQL); default $"+envName(servePrefix, "db"))
}

// cliDBTimeout bounds each database call of `rules` and `token`: longer
// than serve's --db-timeout, so that an import of a large file (one
// transaction) fits, and still a bound when the database stops answering.
const cliDBTimeout = time.Minute

// dbDSN is the DSN of --db, or of RATELIMITD_DB when --db was not given;
// false (said on stderr, naming cmd) when neither is.
func dbDSN(flagged string, env lookupEnv, stderr io.Writer, cmd string) (string, bool) {
	if flagged == "" && env != nil {
		flagged, _ = env(envName(servePrefix, "db"))
	}
	if flagged == "" {
		fmt.Fprintf(stderr, "ratelimitd %s: --db: required (file:PATH or postgres://...; or %s)\n", cmd, envName(servePrefix, "db"))
		return "", false
	}
	return flagged, true
}

// parseInterspersed parses args with fs, flags before or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
