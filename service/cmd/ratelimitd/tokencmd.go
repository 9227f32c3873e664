package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// tokenCmd runs `ratelimitd token create NAME --scope read|write`, `token
// list` and `token revoke NAME`, each with --db DSN (or RATELIMITD_DB):
// the admin API's tokens in a rules database. create prints the secret,
// alone, on stdout: it is stored hashed and cannot be shown again.
func tokenCmd(ctx context.Context, args []string, stdout, stderr io.Writer, env lookupEnv) int {
	t, ok := parseToken(args, stderr, env)
	if !ok {
		return 2
	}
	db, err := rulesdb.Open(ctx, t.dsn, rulesdb.WithTimeout(cliDBTimeout))
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd token: --db: %v\n", err)
		return 1
	}
	defer func() { _ = db.Close() }()
	switch t.sub {
	case "create":
		return tokenCreate(ctx, db, cliActor(env), t, stdout, stderr)
	case "revoke":
		if err := db.RevokeToken(ctx, cliActor(env), t.name); err != nil {
			fmt.Fprintf(stderr, "ratelimitd token revoke: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "token %q revoked\n", t.name)
		return 0
	}
	ts, err := db.Tokens(ctx)
	if err == nil {
		err = writeTokens(stdout, ts)
	}
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		fmt.Fprintf(stderr, "ratelimitd token list: %v\n", err)
		return 1
	}
	return 0
}

// tokenArgs is one token subcommand, read from its arguments.
type tokenArgs struct {
	sub   string // create, list or revoke
	name  string // the token's, for create and revoke
	scope rulesdb.Scope
	dsn   string
}

// tokenUsage is the token subcommands' usage.
const tokenUsage = "usage: ratelimitd token create NAME --scope read|write --db DSN | token list --db DSN | token revoke NAME --db DSN\n" +
	"(--db defaults to $RATELIMITD_DB)"

// parseToken reads a token subcommand from args (flags before or after
// NAME); false after a usage error, said on stderr.
func parseToken(args []string, stderr io.Writer, env lookupEnv) (tokenArgs, bool) {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		fmt.Fprintln(stderr, tokenUsage)
		return tokenArgs{}, false
	}
	t := tokenArgs{sub: args[0]}
	fs := flag.NewFlagSet("token "+t.sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flagDSN := dbFlag(fs)
	scope := new(string)
	if t.sub == "create" {
		scope = fs.String("scope", "", "what the token may do: read (GET, HEAD) or write (everything)")
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return t, false
	}
	var ok bool
	if t.dsn, ok = dbDSN(*flagDSN, env, stderr, "token"); !ok {
		return t, false
	}
	if (t.sub == "list") != (len(pos) == 0) || len(pos) > 1 {
		fmt.Fprintln(stderr, tokenUsage)
		return t, false
	}
	if len(pos) == 1 {
		t.name = pos[0]
	}
	if t.sub == "create" {
		if t.scope, err = rulesdb.ParseScope(*scope); err != nil {
			fmt.Fprintln(stderr, "ratelimitd token create: --scope: must be read or write")
			return t, false
		}
	}
	return t, true
}

// tokenCreate creates t's token and prints its secret on stdout, alone.
func tokenCreate(ctx context.Context, db *rulesdb.DB, actor string, t tokenArgs, stdout, stderr io.Writer) int {
	secret, _, err := db.CreateToken(ctx, actor, t.name, t.scope)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd token create: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "token %q (scope %s) created: the secret above is shown once and cannot be shown again; store it now\n", t.name, t.scope)
	return 0
}

// writeTokens writes the tokens as a table: name, scope, created, revoked.
func writeTokens(w io.Writer, ts []rulesdb.Token) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tCREATED\tREVOKED")
	for _, t := range ts {
		revoked := "-"
		if !t.RevokedAt.IsZero() {
			revoked = t.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Scope, t.CreatedAt.Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

// cliActor is the audit actor of the command line's changes: "cli:" and
// the OS user's name (see cliName).
func cliActor(env lookupEnv) string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return cliName(u.Username)
	}
	if name, ok := env("USER"); ok && name != "" {
		return cliName(name)
	}
	if h, err := os.Hostname(); err == nil {
		return "cli:unknown@" + h
	}
	return "cli:unknown"
}

// cliName is the actor "cli:NAME" of an OS user's name: as it is, or
// quoted (strconv.QuoteToASCII) when it is not valid UTF-8 or holds a
// control character, which the audit log does not store.
func cliName(name string) string {
	if !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return "cli:" + strconv.QuoteToASCII(name)
	}
	return "cli:" + name
}
