package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// rulesCmd runs `ratelimitd rules import FILE --db DSN` and `ratelimitd
// rules export [FILE] --db DSN`: rules as a JSON array in the admin API's
// shape, to and from a rules database (SQLite or PostgreSQL). --db falls
// back to RATELIMITD_DB, as serve's does. An import is one transaction:
// every rule of the file is written, or none.
func rulesCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	const use = "usage: ratelimitd rules import FILE --db DSN [--actor NAME] | ratelimitd rules export [FILE] --db DSN"
	if len(args) == 0 || (args[0] != "import" && args[0] != "export") {
		fmt.Fprintln(stderr, use)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("rules "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flagDSN := dbFlag(fs)
	actor := fs.String("actor", "cli", "who the audit log records as making the import")
	// Flags may come before or after FILE.
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return 2
	}
	dsn, ok := dbDSN(*flagDSN, env, stderr, "rules")
	switch {
	case !ok:
		return 2
	case sub == "import" && len(pos) != 1, sub == "export" && len(pos) > 1:
		fmt.Fprintln(stderr, use)
		return 2
	case !utf8.ValidString(*actor) || strings.IndexByte(*actor, 0) >= 0:
		fmt.Fprintf(stderr, "ratelimitd rules: --actor: must be valid UTF-8 without NUL, got %q\n", *actor)
		return 2
	}
	db, err := rulesdb.Open(ctx, dsn, rulesdb.WithTimeout(cliDBTimeout))
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd rules: --db: %v\n", err)
		return 1
	}
	defer func() { _ = db.Close() }()
	if sub == "import" {
		return rulesImport(ctx, db, pos[0], *actor, stdout, stderr)
	}
	return rulesExport(ctx, db, pos, stdout, stderr)
}

func rulesImport(ctx context.Context, db *rulesdb.DB, path, actor string, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd rules import: %v\n", err)
		return 1
	}
	defer func() { _ = f.Close() }()
	rs, err := rulesdb.ReadRules(f)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd rules import: %s: %v\n", path, err)
		return 1
	}
	n, err := db.Import(ctx, actor, rs)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd rules import: %s: %v (nothing imported)\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "imported %d of %d rules\n", n, len(rs))
	return 0
}

func rulesExport(ctx context.Context, db *rulesdb.DB, pos []string, stdout, stderr io.Writer) (code int) {
	rs, err := db.All(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd rules export: %v\n", err)
		return 1
	}
	w := stdout
	if len(pos) == 1 {
		f, err := os.Create(pos[0])
		if err != nil {
			fmt.Fprintf(stderr, "ratelimitd rules export: %v\n", err)
			return 1
		}
		defer func() {
			if err := f.Close(); err != nil && code == 0 {
				fmt.Fprintf(stderr, "ratelimitd rules export: %v\n", err)
				code = 1
			}
		}()
		w = f
	}
	if err := rulesdb.WriteRules(w, rs); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		fmt.Fprintf(stderr, "ratelimitd rules export: %v\n", err)
		return 1
	}
	return 0
}
